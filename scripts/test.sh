#!/usr/bin/env bash
# Set up (idempotent), build, and run the whole test suite. GPU tests (label gpu) skip without CUDA.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "${DROPE_BUILD_DIR:-$ROOT/build}"
ctest --output-on-failure -j "${DROPE_TEST_JOBS:-2}" "$@"
