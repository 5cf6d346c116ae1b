#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/, clang + ASan + UBSan, torch-free) in build-fuzz/ and runs each for
# a set time, starting from its seed corpus fuzz/corpus/<target>/ plus the saved crash inputs
# tests/data/fuzz-regressions/<target>/. Prints executions per target; exits 1 if any target crashed
# (the crashing input is left in build-fuzz/artifacts/<target>/: copy it to tests/data/fuzz-regressions/
# <target>/ once fixed, where tests/test_fuzz_regressions.cpp replays it).
#
#   scripts/fuzz.sh [seconds-per-target] [target...]   # default 60 s, every target
#   scripts/fuzz.sh --replay [target...]                # run the corpora once (no fuzzing)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${DROPE_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
REPLAY=0
SECONDS_PER=60
if [ "${1:-}" = "--replay" ]; then REPLAY=1; shift
elif [[ "${1:-}" =~ ^[0-9]+$ ]]; then SECONDS_PER=$1; shift; fi

if [ ! -f "$BUILD/build.ninja" ]; then
  TORCH_CMAKE="$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="${CXX_FUZZ:-clang++}" \
    -DCMAKE_PREFIX_PATH="$TORCH_CMAKE" -DDROPE_WITH_CUDA=OFF -DDROPE_BUILD_TESTS=OFF -DDROPE_FUZZ=ON >/dev/null
fi
export CCACHE_BASEDIR="$ROOT"
cmake --build "$BUILD" --target drope_fuzzers -j "${DROPE_JOBS:-$(nproc)}"

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  for exe in "$BUILD"/fuzz/fuzz_*; do targets+=("$(basename "$exe" | sed 's/^fuzz_//')"); done
fi

failed=0
printf '%-20s %10s %12s %10s %s\n' target seconds executions exec/s result
for t in "${targets[@]}"; do
  exe="$BUILD/fuzz/fuzz_$t"
  seeds="$ROOT/fuzz/corpus/$t"
  regress="$ROOT/tests/data/fuzz-regressions/$t"
  work="$BUILD/corpus/$t"
  art="$BUILD/artifacts/$t/"
  mkdir -p "$work" "$art"
  dirs=("$work" "$seeds")
  [ -d "$regress" ] && dirs+=("$regress")
  log="$BUILD/fuzz-$t.log"
  if [ $REPLAY -eq 1 ]; then log="$BUILD/fuzz-$t.replay.log"; fi
  opts=(-rss_limit_mb=2048 -timeout=20 -max_len=16384 -print_final_stats=1 "-artifact_prefix=$art")
  if [ $REPLAY -eq 1 ]; then
    opts+=(-runs=0)
  else
    opts+=("-max_total_time=$SECONDS_PER")
  fi
  start=$(date +%s)
  if ASAN_OPTIONS=detect_leaks=1 "$exe" "${opts[@]}" "${dirs[@]}" >"$log" 2>&1; then result=ok; else result=CRASH; failed=1; fi
  secs=$(( $(date +%s) - start ))
  execs=$(grep -ao 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
  printf '%-20s %10s %12s %10s %s\n' "$t" "$secs" "${execs:-?}" "$(( ${execs:-0} / (secs > 0 ? secs : 1) ))" "$result"
  if [ "$result" = CRASH ]; then grep -aE 'ERROR|==ABORTING|invariant|does not name|uncaught|Test unit written' "$log" | head -5 || true; fi
done
exit $failed
