#!/usr/bin/env bash
# Runs one study: bash studies/run.sh NAME [ARGS...]   (NAME: a module studies/NAME.py with a main(); --help after
# NAME lists its options). The study runs with the project venv's python from the repository root (scripts/run_python.sh).
# quickstart, quickstart_isa, reproduce, real_model and real_model_recal run scripts/setup.sh (idempotent;
# DROPE_SKIP_SETUP=1 skips it); the others need a build already. Once the venv is set up (its requirements stamp is current), the
# study checks its arguments before the set-up (DROPE_SETUP_PENDING=1: drope_scripts.cli.run_pending_setup), so a
# bad argument is refused at once; before that the set-up runs first. scripts/README.md lists the studies.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="${1:-}"
# A study is a module studies/NAME.py with a main(): NAME is a plain module name (no path, no suffix), so that
# "../x", "sub/y" or "__init__" are not run as studies.
is_study() { [[ "$1" =~ ^[a-z][a-z0-9_]*$ ]] && [ -f "$ROOT/studies/$1.py" ] && grep -q '^def main(' "$ROOT/studies/$1.py"; }
if ! is_study "$NAME"; then
  names=()
  for f in "$ROOT"/studies/*.py; do
    n="$(basename "$f" .py)"; ! is_study "$n" || names+=("$n")
  done
  list="$(printf '%s, ' "${names[@]}")"
  if [ -z "$NAME" ]; then echo "usage: bash studies/run.sh NAME [ARGS...]; NAME is one of: ${list%, }" >&2
  else echo "studies/run.sh: '$NAME' is not a study (expected one of: ${list%, })" >&2; fi
  exit 2
fi
shift
case "${DROPE_SKIP_SETUP:-0}" in
  0 | 1) ;;
  *) echo "studies/run.sh: DROPE_SKIP_SETUP must be 0 or 1, got '$DROPE_SKIP_SETUP'" >&2; exit 2 ;;
esac
unset DROPE_SETUP_PENDING
# The quickstart builds only the tools it runs (and the Python package's extension): about 72 % of a full build's
# compile time; scripts/test.sh builds the rest. DROPE_SETUP_TARGETS set (even empty: all) takes precedence.
[ "$NAME" != quickstart ] || export DROPE_SETUP_TARGETS="${DROPE_SETUP_TARGETS-drope-train drope-eval drope-data drope_sentencepiece}"
case "$NAME" in
  quickstart | quickstart_isa | reproduce | real_model | real_model_recal)
    if [ "${DROPE_SKIP_SETUP:-0}" != 1 ]; then
      if [ -x "$ROOT/.venv/bin/python" ] && cmp -s "$ROOT/requirements.txt" "$ROOT/.venv/.drope-requirements"; then
        export DROPE_SETUP_PENDING=1  # the study runs scripts/setup.sh once its arguments are checked
      else
        bash "$ROOT/scripts/setup.sh"
      fi
    fi ;;
esac
exec bash "$ROOT/scripts/run_python.sh" "studies.$NAME" "$@"
