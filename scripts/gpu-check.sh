#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: set up and build (scripts/setup.sh), show the GPU, run the CUDA kernel
# tests (ctest label gpu), then the attention benchmark on the GPU when drope-bench supports it, and print
# a summary (also written as $OUT_DIR/summary.json and summary.md). Extra arguments go to drope-bench (e.g.
# --lengths 1024,4096,8192). --dry-run prints the steps without running them (checkable on a CPU machine).
# The attention benchmark's "ours" row runs the CUDA attention plan (docs/gpu.md): FlashAttention-2 for
# causal / window / GQA / decode, memory-efficient attention for ALiBi training.
# Not yet wired (issue 20): the qwen2-0.5b bf16 training step with MFU, the NCCL single-rank smoke run and
# greedy generation vs CPU tokens; the summary lists them as "not run".
set -uo pipefail
DRY_RUN=0
if [ "${1:-}" = "--dry-run" ]; then DRY_RUN=1; shift; fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${DROPE_BUILD_DIR:-$ROOT/build}"
OUT_DIR="${DROPE_GPU_CHECK_OUT:-$BUILD_DIR/gpu-check}"
log() { printf '\033[1m[gpu-check]\033[0m %s\n' "$*"; }

setup_status=skipped tests_status=skipped bench_status=skipped
if [ "$DRY_RUN" = 1 ]; then
  log "dry run: would run scripts/setup.sh (CUDA archs ${DROPE_CUDA_ARCHS:-80;90}), nvidia-smi,"
  log "  ctest -L gpu in $BUILD_DIR, drope-bench attention --device cuda --dtype bfloat16 $*,"
  log "  and write $OUT_DIR/summary.json and summary.md"
  exit 0
fi
log "setup and build"
if bash "$ROOT/scripts/setup.sh"; then setup_status=ok; else setup_status=FAILED; fi

log "GPU"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi || true
else
  log "nvidia-smi not found: no NVIDIA driver on this machine"
fi

mkdir -p "$OUT_DIR"
if [ "$setup_status" = ok ]; then
  log "ctest -L gpu"
  if (cd "$BUILD_DIR" && ctest -L gpu --output-on-failure 2>&1 | tee "$OUT_DIR/ctest-gpu.log"); then
    tests_status=ok
  else
    tests_status=FAILED
  fi
  if grep -q "Skipped" "$OUT_DIR/ctest-gpu.log" 2>/dev/null && [ "$tests_status" = ok ]; then
    tests_status="ok (some skipped: is CUDA visible to LibTorch?)"
  fi

  BENCH="$BUILD_DIR/drope-bench"
  if [ -x "$BENCH" ] && "$BENCH" attention --help 2>&1 | grep -q -- "--device"; then
    log "drope-bench attention --device cuda"
    if "$BENCH" attention --device cuda --dtype bfloat16 --json "$OUT_DIR/bench-attention.json" "$@" \
        2>&1 | tee "$OUT_DIR/bench-attention.txt"; then
      bench_status=ok
    else
      bench_status=FAILED
    fi
  else
    log "drope-bench attention --device not available: benchmark skipped"
  fi
fi

log "summary"
printf '  %-10s %s\n' setup "$setup_status" "gpu tests" "$tests_status" benchmark "$bench_status"
printf '  %-10s %s\n' logs "$OUT_DIR"
gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
json_str() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }
tmp="$OUT_DIR/summary.json.tmp.$$"
{
  printf '{\n  "gpu": %s,\n  "setup": %s,\n  "gpu_tests": %s,\n  "attention_bench": %s,\n' \
    "$(json_str "${gpu_name:-none}")" "$(json_str "$setup_status")" "$(json_str "$tests_status")" \
    "$(json_str "$bench_status")"
  printf '  "bench_json": %s,\n' "$(json_str "$OUT_DIR/bench-attention.json")"
  printf '  "train_step_qwen2_0_5b": "not run",\n  "nccl_smoke": "not run",\n  "greedy_vs_cpu": "not run"\n}\n'
} > "$tmp" && mv "$tmp" "$OUT_DIR/summary.json"
tmp="$OUT_DIR/summary.md.tmp.$$"
{
  printf '# GPU check\n\n| step | status |\n|---|---|\n'
  printf '| GPU | %s |\n| setup/build | %s |\n| ctest -L gpu | %s |\n| drope-bench attention | %s |\n' \
    "${gpu_name:-none}" "$setup_status" "$tests_status" "$bench_status"
  printf '| qwen2-0.5b bf16 step | not run |\n| NCCL smoke | not run |\n| greedy = CPU tokens | not run |\n'
} > "$tmp" && mv "$tmp" "$OUT_DIR/summary.md"
[ "$setup_status" = ok ] && [[ "$tests_status" != FAILED ]] && [ "$bench_status" != FAILED ]
