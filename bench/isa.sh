#!/usr/bin/env bash
# Benchmarks (not tests) at every instruction-set level this CPU runs, side by side in one run: drope's CPU
# kernels and LibTorch's own dispatch capped together (DROPE_CPU_ISA, ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
# MKL_ENABLE_INSTRUCTIONS), so that an AVX-512 machine also measures what an AVX2 or SSE-only user gets.
#   bash bench/isa.sh [--quick]      → runs/bench-isa/<level>-*.txt and a summary on stdout
# Levels the CPU lacks are listed as such (they cannot be emulated upwards).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${DROPE_BIN:-$ROOT/build}"
PY="$ROOT/.venv/bin/python"
OUT="$ROOT/runs/bench-isa"
QUICK=0; [ "${1:-}" = "--quick" ] && QUICK=1
mkdir -p "$OUT"

# shellcheck source=scripts/lib/isa_env.sh
source "$ROOT/scripts/lib/isa_env.sh"
lens="1024,2048,4096,8192"; steps=12; steps50=8; parts_repeats=10
[ $QUICK = 1 ] && { lens="1024,2048"; steps=6; steps50=4; parts_repeats=3; }
for isa in avx512 avx2 baseline; do
  if ! isa_runs "$BIN" "$isa" "$OUT/$isa-check.txt"; then
    echo "== $isa: not run ($(head -1 "$OUT/$isa-check.txt"))"
    continue
  fi
  echo "== $isa ($(isa_env $isa))"
  # shellcheck disable=SC2046  # the level's VAR=value words
  env $(isa_env $isa) OMP_NUM_THREADS=2 "$BIN/drope-bench" attention --lengths "$lens" --cases causal,window,alibi,gqa \
    --impls ours,sdpa,sdpa_mask --heads 8 --head-dim 64 --window 512 --repeats 3 --warmup 1 --quiet \
    | tee "$OUT/$isa-attention.txt"
  # shellcheck disable=SC2046
  env $(isa_env $isa) OMP_NUM_THREADS=2 "$BIN/drope-bench" layers | tee "$OUT/$isa-layers.txt"
  # shellcheck disable=SC2046
  env $(isa_env $isa) OMP_NUM_THREADS=2 "$BIN/drope-bench" step-parts --repeats $parts_repeats \
    | tee "$OUT/$isa-step-parts.txt"
  "$PY" "$ROOT/bench/train.py" --isa $isa --preset tiny-256 --seq-len 512 --batch 8 --steps $steps --warmup 2 \
    --threads 2 --bin "$BIN" | tee "$OUT/$isa-train-tiny.txt"
  "$PY" "$ROOT/bench/train.py" --isa $isa --preset small-50m --vocab 32000 --seq-len 512 --batch 4 \
    --steps $steps50 --warmup 2 --threads 2 --bin "$BIN" | tee "$OUT/$isa-train-50m.txt"
done
