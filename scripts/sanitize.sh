#!/usr/bin/env bash
# AddressSanitizer + UndefinedBehaviorSanitizer build (build-asan/, -DDROPE_SANITIZE=ON) of the torch-free
# libraries and their unit tests, then runs them. LibTorch is not instrumented (and an ASan runtime does
# not mix with the prebuilt wheel), so the torch-linked targets are not built here: what runs is
# drope_torchfree_tests (configs/strict YAML, tokenizers, shards, data preparation, plots, limits,
# fuzz-regression replay) and drope_tasks_tests (NIAH, LongBench, segmentation, reports).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
source "$ROOT/scripts/lib/knobs.sh"  # every knob and argument before any work (scripts/lib/knobs.sh)
sanitize_knobs scripts/sanitize.sh "$ROOT"
sanitize_args scripts/sanitize.sh "$@"
BUILD="${DROPE_ASAN_BUILD_DIR:-$ROOT/build-asan}"
if [ ! -f "$BUILD/build.ninja" ]; then
  TORCH_CMAKE="$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_PREFIX_PATH="$TORCH_CMAKE" \
    -DDROPE_WITH_CUDA=OFF -DDROPE_SANITIZE=ON >/dev/null
fi
export CCACHE_BASEDIR="$ROOT"
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
targets=(drope_torchfree_tests)
# grep reads the whole list (no -q): an early exit would SIGPIPE ninja and fail the pipe under pipefail.
if ninja -C "$BUILD" -t targets all 2>/dev/null | grep '^drope_tasks_tests:' >/dev/null; then targets+=(drope_tasks_tests); fi
cmake --build "$BUILD" --target "${targets[@]}" -j "${DROPE_JOBS:-$(nproc)}"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$ROOT/scripts/lsan.supp"
status=0
for t in "${targets[@]}"; do
  echo "== $t (ASan + UBSan)"
  "$BUILD/tests/$t" --gtest_brief=1 "$@" || status=1
done
exit $status
