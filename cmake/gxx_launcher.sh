#!/bin/sh
# CXX_COMPILER_LAUNCHER of the CPU kernels in a Clang build (CMakeLists.txt, OpenMP): CMake runs
#   gxx_launcher.sh GXX COMPILER ARGS...
# and this runs GXX ARGS... instead, so that the kernels' OpenMP regions call the wheel's libgomp.
set -eu
gxx="$1"
shift 2
exec "$gxx" "$@"
