#!/usr/bin/env bash
# Set up (idempotent), build, and run the whole test suite. GPU tests (label gpu) skip without CUDA.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
# Every knob of this script and of the scripts it runs, and the ctest arguments, before the first step.
source "$ROOT/scripts/lib/knobs.sh"
setup_knobs scripts/test.sh "$ROOT"
sanitize_knobs scripts/test.sh "$ROOT"
knob_int scripts/test.sh DROPE_TEST_JOBS 1 1024
knob_switch scripts/test.sh DROPE_SANITIZE_TESTS
knob_switch scripts/test.sh DROPE_REQUIRE_PYTHON_EXT
ctest_args scripts/test.sh "$@"
phase() { printf '\033[1m[test]\033[0m %s (%d s so far)\n' "$*" "$SECONDS"; }
bash "$ROOT/scripts/setup.sh"
phase "set-up and build done"
# Style first: clang-format over the C++ files and ruff over the Python files (scripts/lint.sh).
bash "$ROOT/scripts/lint.sh"
phase "lint done"
# ASan + UBSan over the torch-free unit tests in build-asan/ (LibTorch is not instrumented); 0 skips.
# First, so that ctest's summary line is the last thing the run prints.
if [ "${DROPE_SANITIZE_TESTS:-1}" = 1 ]; then bash "$ROOT/scripts/sanitize.sh"; fi
phase "sanitizer tests done; ctest next"
cd "${DROPE_BUILD_DIR:-$ROOT/build}"
# setup.sh installed the Python package: its tests must not skip for want of it.
export DROPE_REQUIRE_PYTHON_EXT="${DROPE_REQUIRE_PYTHON_EXT:-1}"
ctest --output-on-failure -j "${DROPE_TEST_JOBS:-2}" "$@"
