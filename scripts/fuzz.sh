#!/usr/bin/env bash
# Runs every Go fuzz target in the module for a bounded time each (FUZZTIME, default 10s).
# go test -fuzz takes one target per run, so targets are listed and run one by one.
set -euo pipefail
fuzztime=${FUZZTIME:-10s}
cd "$(dirname "$0")/.."
status=0
count=0
for dir in $(go list -f '{{.Dir}}' ./...); do
  pkg=$(go list -f '{{.ImportPath}}' "$dir")
  for target in $(grep -h -o '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz: $pkg $target ($fuzztime)"
    if ! go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg"; then
      status=1
    fi
    count=$((count + 1))
  done
done
echo "fuzz: ran $count targets"
exit $status
