#!/usr/bin/env bash
# Runs every Go fuzz target in the module (or in the packages named as arguments) for FUZZTIME
# (default 8s) of fuzzing each.
#
# Each package's test binary is built once with fuzzing instrumentation (go test -c -fuzz), and
# each target runs in it until it is interrupted with SIGINT at FUZZTIME, which the fuzzing
# engine treats as a normal end: it saves what it found and passes unless an input failed.
# Ending the run with -fuzztime=8s instead races the Go 1.26 engine's deadline against its
# workers' shutdown and can fail a healthy run with "context deadline exceeded"; a count
# (-fuzztime=Nx) would not bound the time. The interrupt goes to the engine's coordinator only
# (--foreground), never to its worker processes: a worker that sees it first exits while the
# coordinator still waits on it, which the engine records as a crash with no cause ("fuzzing
# process hung or terminated unexpectedly: <nil>"). The coordinator stops its workers itself.
# A failing input is written under the package's testdata/fuzz as usual and fails the script.
# Minimizing an input is capped at 100 executions (-test.fuzzminimizetime=100x): the engine
# minimizes every input that finds new coverage, by default for up to 60 s, and on targets
# with inputs of kilobytes (an ELF file, a CDTI stream) that used up the whole FUZZTIME with
# a few dozen executions of fuzzing (symbols' FuzzOpen: 4 executions in 8 s; 7,000 with the cap).
# The engine's cache of interesting inputs is this run's own, not the one under GOCACHE: before
# fuzzing, the engine runs every cached input once, one at a time (about a hundred a second on a
# loaded machine), and a shared cache only grows from run to run, until that pass took the whole
# FUZZTIME (FuzzOpen: 725 cached ELF files, 0 executions of fuzzing; FuzzParseListPids: 220
# inputs, 221 executions; with a fresh cache 2,000 and 44,000). The seeds and testdata/fuzz
# still run every time; an input that fails is saved under testdata/fuzz, not in the cache.
set -euo pipefail
fuzztime=${FUZZTIME:-8s}
cd "$(dirname "$0")/.."
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
cache=$bin/cache
status=0
count=0
for dir in $(go list -f '{{.Dir}}' "${@:-./...}"); do
  targets=$(grep -h -o '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u || true)
  [[ -n $targets ]] || continue
  pkg=$(go list -f '{{.ImportPath}}' "$dir")
  test="$bin/$(tr / _ <<<"$pkg").test"
  if ! go test -c -fuzz=. -o "$test" "$pkg"; then
    echo "fuzz: $pkg: build failed"
    status=1
    continue
  fi
  for target in $targets; do
    echo "fuzz: $pkg $target ($fuzztime)"
    # -k: a target that ignores the interrupt (stuck in an input) is killed and fails.
    if out=$(cd "$dir" && timeout --foreground --preserve-status -s INT -k 60s "$fuzztime" \
      "$test" -test.run='^$' -test.fuzz="^${target}\$" -test.fuzztime=1000000000x \
      -test.fuzzminimizetime=100x -test.fuzzcachedir="$cache/$pkg" -test.timeout=20m -test.paniconexit0 2>&1); then
      echo "$out" | tail -2
    else
      echo "$out"
      echo "fuzz: $pkg $target: failed"
      status=1
    fi
    count=$((count + 1))
  done
done
echo "fuzz: ran $count targets"
exit $status
