#!/usr/bin/env bash
# Runs one study: bash studies/run.sh NAME [ARGS...]   (NAME: a file studies/NAME.py; --help after NAME lists
# its options). The study runs with the project venv's python from the repository root (scripts/run_python.sh).
# quickstart, quickstart_isa, reproduce and real_model first run scripts/setup.sh (idempotent; DROPE_SKIP_SETUP=1
# skips it); the others need a build already. scripts/README.md lists the studies.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="${1:-}"
if [ -z "$NAME" ] || [ ! -f "$ROOT/studies/$NAME.py" ] || [ "$NAME" = __init__ ]; then
  echo "usage: bash studies/run.sh NAME [ARGS...]; NAME is one of:" >&2
  for f in "$ROOT"/studies/*.py; do
    n="$(basename "$f" .py)"; [ "$n" = __init__ ] || echo "  $n" >&2
  done
  exit 2
fi
shift
case "$NAME" in
  quickstart | quickstart_isa | reproduce | real_model)
    if [ "${DROPE_SKIP_SETUP:-0}" != 1 ]; then bash "$ROOT/scripts/setup.sh"; fi ;;
esac
exec bash "$ROOT/scripts/run_python.sh" "studies.$NAME" "$@"
