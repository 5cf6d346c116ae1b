#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh needs into DEST, for a GPU node that cannot install or build (no network, no
# -dev packages): the CUDA-enabled binaries of BUILD (default build/), the GPU tests' ctest files, and every
# shared library they load that is neither LibTorch's (the node has the same torch wheel) nor the C runtime's.
# On the node, with the checkout at the same absolute path as here (ctest files name absolute paths):
#   ln -s DEST/build build-gpu
#   LD_LIBRARY_PATH=<torch>/lib:DEST/lib DROPE_GPU_CHECK_PREBUILT=1 DROPE_BUILD_DIR=$PWD/build-gpu scripts/gpu-check.sh
# Usage: scripts/gpu-bundle.sh DEST [BUILD]
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: $0 DEST [BUILD]" >&2; exit 2; }
DEST="$1"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${2:-$ROOT/build}" && pwd)"
if [ -e "$DEST" ] && [ -n "$(ls -A "$DEST" 2>/dev/null)" ] && [ ! -f "$DEST/.drope-gpu-bundle" ]; then
  echo "error: $DEST exists, is not empty and is not a bundle written by $0: not overwriting it" >&2
  exit 2
fi
grep -q '^CMAKE_CUDA_COMPILER:STRING=.\+' "$BUILD/CMakeCache.txt" ||
  { echo "error: $BUILD was configured without CUDA (no nvcc): nothing to bundle" >&2; exit 2; }
BINS=("$BUILD/drope-bench" "$BUILD/drope-train" "$BUILD/drope-model" "$BUILD/drope-data" "$BUILD/drope-eval"
  "$BUILD/tests/drope_gpu_tests")
for b in "${BINS[@]}"; do [ -x "$b" ] || { echo "error: $b not built" >&2; exit 2; }; done
TMP="$(mktemp -d "${DEST%/}.tmp.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$TMP/build/tests" "$TMP/lib"
cp "${BINS[@]:0:5}" "$TMP/build/"
cp "$BUILD/tests/drope_gpu_tests" "$BUILD/tests/drope_gpu_tests[1]_include.cmake" \
  "$BUILD/tests/drope_gpu_tests[1]_tests.cmake" "$TMP/build/tests/"
echo 'subdirs("tests")' > "$TMP/build/CTestTestfile.cmake"
echo "include(\"$BUILD/tests/drope_gpu_tests[1]_include.cmake\")" > "$TMP/build/tests/CTestTestfile.cmake"
# Libraries: skip LibTorch's wheel (torch/lib, nvidia/*) and the C/C++ runtime, which the node has (newer).
ldd "${BINS[@]}" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | sort -u |
  grep -v -E '/(torch|nvidia)/|/lib(c|m|dl|rt|pthread|util|stdc\+\+|gcc_s)\.so' |
  while read -r lib; do cp -L "$lib" "$TMP/lib/"; done
touch "$TMP/.drope-gpu-bundle"
rm -rf "$DEST"
mv "$TMP" "$DEST"
trap - EXIT
du -sh "$DEST"
