#!/bin/bash
# Wall-clock seconds of parity runs, 3 repetitions each (figures: bench/results/parity.md).
# Usage: bash bench/parity_timings.sh [VENV]   (default VENV: /tmp/venv-parity)
VENV=${1:-/tmp/venv-parity}
cd "$(dirname "$0")/.." || exit 1
t() { local s e rc; s=$(date +%s.%N); "$@" >/dev/null 2>&1; rc=$?; e=$(date +%s.%N); echo "$(echo "$e - $s" | bc) rc=$rc"; }
for i in 1 2 3; do echo "baseline-collect-only $(t "$VENV/bin/python" -m pytest parity_suite/tests/test_memory_parity.py -q -p no:cacheprovider --co)"; done
for i in 1 2 3; do echo "memory-suite $(t "$VENV/bin/python" -m pytest parity_suite/tests/test_memory_parity.py -q -p no:cacheprovider)"; done
for name in memory local-disk sqlite; do
  for i in 1 2 3; do echo "cli-$name $(t "$VENV/bin/memvault" parity "$name")"; done
done
echo "all-parity_suite-tests $(t "$VENV/bin/python" -m pytest parity_suite/tests -q -p no:cacheprovider)"
