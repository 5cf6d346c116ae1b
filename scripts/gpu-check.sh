#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: set up and build (scripts/setup.sh), show the GPU, run the CUDA kernel
# tests (ctest label gpu), then the attention benchmark on the GPU when drope-bench supports it, and print
# a summary. Extra arguments go to drope-bench (e.g. --lengths 1024,4096,8192).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${DROPE_BUILD_DIR:-$ROOT/build}"
OUT_DIR="${DROPE_GPU_CHECK_OUT:-$BUILD_DIR/gpu-check}"
log() { printf '\033[1m[gpu-check]\033[0m %s\n' "$*"; }

setup_status=skipped tests_status=skipped bench_status=skipped
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
[ "$setup_status" = ok ] && [[ "$tests_status" != FAILED ]] && [ "$bench_status" != FAILED ]
