#!/bin/bash
# Interleaved A/B run time of `memvault parity NAME`: an older commit against this tree, in the same
# venv and under the same machine load (figures: bench/results/parity.md).
# Usage: bash bench/parity_ab.sh OLD_COMMIT [VENV]   (default VENV: .venv of this tree)
# The old tree is extracted with `git archive` and put first on PYTHONPATH, so its core, suite and
# sqlite/local-disk plugins shadow the venv's editable installs of this tree.
set -u
OLD_COMMIT=$1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${2:-$ROOT/.venv}
OLD=$(mktemp -d)
trap 'rm -rf "$OLD"' EXIT
git -C "$ROOT" archive "$OLD_COMMIT" | tar -x -C "$OLD"
OLDPATH=$OLD/core/src:$OLD/parity_suite/src:$OLD/plugins/sqlite/src:$OLD/plugins/local-disk/src
cd "$OLD" || exit 1  # neither run leaves files in the source tree
# Each tree runs its own command line (the console script names the newest tree's module).
if [ -f "$OLD/core/src/memvault/cli.py" ]; then OLDCLI=memvault.cli; else OLDCLI=memvault.cli.main; fi
run() {
  local label=$1; shift
  /usr/bin/time -f "$label wall=%e cpu=%U+%S" "$@" >"$OLD/out.txt" 2>"$OLD/time.txt"
  echo "$(tail -1 "$OLD/time.txt") | $(grep -E '^memvault parity' "$OLD/out.txt")"
}
for name in memory sqlite local-disk; do
  for i in 1 2 3; do
    run "old-$name" env PYTHONPATH="$OLDPATH" "$VENV/bin/python" -c "from $OLDCLI import main; main()" parity "$name"
    run "new-$name" "$VENV/bin/memvault" parity "$name"
  done
done
