#!/usr/bin/env bash
# The quickstart at two instruction-set levels of one machine, drope's kernels and LibTorch's dispatch capped
# together (scripts/lib/isa_env.sh), and one table of how far the results move: the same seeds and data, only
# the floating-point order differs.
#   bash scripts/quickstart_isa.sh [LEVEL_A LEVEL_B]   # default: avx2 baseline
# Outputs: runs/quickstart-<level>/ (a whole quickstart each) and runs/quickstart-isa.md (both tables with
# every differing cell as "A → B", and the largest differences). Levels the CPU lacks are refused up front.
# DROPE_SKIP_SETUP=1 skips scripts/setup.sh; DROPE_BUILD_DIR picks the binaries (build/).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=lib/isa_env.sh
source "$ROOT/scripts/lib/isa_env.sh"
[ $# = 0 ] || [ $# = 2 ] || { echo "quickstart_isa: expected two levels (avx512, avx2, baseline), got $#" >&2; exit 2; }
A="${1:-avx2}"; B="${2:-baseline}"
[ "$A" != "$B" ] || { echo "quickstart_isa: the two levels must differ, got $A twice" >&2; exit 2; }
isa_env "$A" >/dev/null && isa_env "$B" >/dev/null || exit 2
if [ "${DROPE_SKIP_SETUP:-0}" != 1 ]; then bash "$ROOT/scripts/setup.sh"; fi
BIN="${DROPE_BUILD_DIR:-$ROOT/build}"
for isa in "$A" "$B"; do
  if ! isa_runs "$BIN" "$isa"; then
    echo "quickstart_isa: this CPU cannot run level $isa" >&2; exit 2
  fi
done
for isa in "$A" "$B"; do
  echo "== quickstart at $isa ($(isa_env "$isa"))"
  # shellcheck disable=SC2046
  env $(isa_env "$isa") DROPE_RUN_DIR="$ROOT/runs/quickstart-$isa" DROPE_SKIP_SETUP=1 bash "$ROOT/scripts/quickstart.sh"
done
exec bash "$ROOT/studies/run.sh" isa_compare "$A=runs/quickstart-$A/results.md" \
  "$B=runs/quickstart-$B/results.md" --out runs/quickstart-isa.md
