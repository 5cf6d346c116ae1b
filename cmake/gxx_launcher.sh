#!/bin/sh
# CXX_COMPILER_LAUNCHER of the sources that GCC compiles in a Clang build (CMakeLists.txt): CMake runs
#   gxx_launcher.sh GXX WHICH CACHE COMPILER ARGS...
# WHICH is '*' (every source of the target) or a file name: only the source whose path ends in /WHICH goes to GXX,
# the target's other sources to COMPILER. CACHE is ccache, or '-' for none. The CPU kernels go to GCC so that their
# OpenMP regions call the wheel's libgomp; src/ops/cudnn_graph.cpp because GCC compiles cudnn-frontend's headers in
# about two thirds of Clang's time (59 against 81 CPU-s at -O1 on a 2-core EPYC).
set -eu
gxx="$1" which="$2" cache="$3"
shift 3
compiler="$1"
shift
use="$compiler"
if [ "$which" = "*" ]; then
  use="$gxx"
else
  for a in "$@"; do
    case "$a" in */"$which") use="$gxx" ;; esac
  done
fi
if [ "$cache" = "-" ]; then exec "$use" "$@"; fi
exec "$cache" "$use" "$@"
