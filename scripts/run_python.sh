#!/usr/bin/env bash
# Runs a Python module of drope_scripts (scripts/drope_scripts) or of the studies (studies/) with the project
# venv's python (made by scripts/setup.sh), from the repository root:  bash scripts/run_python.sh MODULE [ARGS...]
# The caller's directory is passed on in DROPE_CALLER_CWD (for modules that take relative paths).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="$ROOT/.venv/bin/python"
[ -x "$PY" ] || { echo "$PY not found: run bash scripts/setup.sh first" >&2; exit 1; }
export DROPE_CALLER_CWD="$PWD"
cd "$ROOT"
PYTHONPATH="$ROOT/scripts:$ROOT${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" -m "$@"
