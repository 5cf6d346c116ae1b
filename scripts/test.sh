#!/usr/bin/env bash
# Set up (idempotent), build, and run the whole test suite. GPU tests (label gpu) skip without CUDA.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
phase() { printf '\033[1m[test]\033[0m %s (%d s so far)\n' "$*" "$SECONDS"; }
bash "$ROOT/scripts/setup.sh"
phase "set-up and build done"
# Style first: clang-format over the C++ files and ruff over the Python files (scripts/lint.sh).
bash "$ROOT/scripts/lint.sh"
phase "lint done"
# ASan + UBSan over the torch-free unit tests in build-asan/ (LibTorch is not instrumented); 0 skips.
# First, so that ctest's summary line is the last thing the run prints.
if [ "${DROPE_SANITIZE_TESTS:-1}" != 0 ]; then bash "$ROOT/scripts/sanitize.sh"; fi
phase "sanitizer tests done; ctest next"
cd "${DROPE_BUILD_DIR:-$ROOT/build}"
# setup.sh installed the Python package: its tests must not skip for want of it.
export DROPE_REQUIRE_PYTHON_EXT="${DROPE_REQUIRE_PYTHON_EXT:-1}"
ctest --output-on-failure -j "${DROPE_TEST_JOBS:-2}" "$@"
