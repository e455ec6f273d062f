#!/usr/bin/env bash
# run-dape.sh: builds hpcdap and the ring example, then runs dape-test.el in a
# headless Emacs. Run it inside the Debian 13 root (make test-editors), whose
# Emacs and dape are Debian's own packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go build -o "$tmp/hpcdap" ./cmd/hpcdap
gcc -g -O0 -o "$tmp/ring" examples/ring/ring.c
dape=$(ls -d /usr/share/emacs/site-lisp/elpa/dape-* | tail -1)
echo "run-dape: ${dape##*/}, $(emacs --version | head -1)"
status=0
HPCDAP=$tmp/hpcdap RING=$tmp/ring RING_SRC=$PWD/examples/ring/ring.c DAPE_EVENTS_LOG=$tmp/events.log \
	emacs -Q --batch -L "$dape" -l ert -l dape \
	-l tests/editors/dape-test.el -f ert-run-tests-batch-and-exit || status=$?
if [[ $status != 0 ]]; then
	echo "run-dape: the DAP messages of the session:"
	cat "$tmp/events.log" 2>/dev/null || true
fi
exit $status
