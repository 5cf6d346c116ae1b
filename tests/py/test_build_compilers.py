"""Which compiler built what: in a Clang build, cmake/gxx_launcher.sh hands the CPU kernels (OpenMP through the
wheel's libgomp) and src/ops/cudnn_graph.cpp (faster under GCC) to GCC and leaves every other source to Clang.
The launcher is checked with stand-in compilers; the build tree by the compiler each object file names."""
import os
import re
import stat
import subprocess

import pytest

from conftest import BIN, ROOT

LAUNCHER = ROOT / "cmake" / "gxx_launcher.sh"


def stand_in(path, name):
    path.write_text(f"#!/bin/sh\necho {name} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def compilers(tmp):
    return stand_in(tmp / "gxx", "gxx"), stand_in(tmp / "clangxx", "clangxx"), stand_in(tmp / "cache", "cache")


def launch(*args):
    r = subprocess.run(["sh", str(LAUNCHER), *map(str, args)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.mark.parametrize("source, expected", [
    ("/r/src/ops/cudnn_graph.cpp", "gxx"),
    ("/r/src/ops/not_cudnn_graph.cpp", "clangxx"),  # the whole file name, not a suffix of it
    ("/r/build/CMakeFiles/drope_ops.dir/Unity/unity_0_cxx.cxx", "clangxx"),
])
def test_one_named_source_goes_to_gcc(compilers, source, expected):
    gxx, clangxx, _ = compilers
    out = launch(gxx, "cudnn_graph.cpp", "-", clangxx, "-O1", "-o", source + ".o", "-c", source)
    assert out == [expected, "-O1", "-o", source + ".o", "-c", source]


def test_star_sends_every_source_to_gcc_through_the_cache(compilers):
    gxx, clangxx, cache = compilers
    out = launch(gxx, "*", cache, clangxx, "-c", "/r/src/kernels/cpu/attention_cpu.cpp")
    assert out == ["cache", str(gxx), "-c", "/r/src/kernels/cpu/attention_cpu.cpp"]


def compiler_of(obj):
    r = subprocess.run(["readelf", "-p", ".comment", str(obj)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    found = {name for name in ("GCC", "clang") if re.search(rf"\b{name}\b", r.stdout)}
    # a Clang object file also names the GCC that built its runtime: only "clang" decides
    return "clang" if "clang" in found else ("GCC" if found else None)


def cache_value(key):
    m = re.search(rf"^{key}:\w+=(.*)$", (BIN / "CMakeCache.txt").read_text(), re.M)
    return m.group(1) if m else ""


@pytest.mark.skipif(not (BIN / "CMakeCache.txt").exists(), reason="no configured build tree")
def test_the_build_tree_uses_the_compiler_each_source_was_given():
    kernels = sorted((BIN / "CMakeFiles/drope_kernels.dir/src/kernels/cpu").glob("*.cpp.o"))
    others = sorted(o for o in (BIN / "CMakeFiles/drope_ops.dir").rglob("*.o") if o.name != "cudnn_graph.cpp.o")
    assert kernels and others, "build the library first"
    clang_build = "clang" in os.path.basename(cache_value("CMAKE_CXX_COMPILER"))
    gcc_objects = kernels[:]
    cudnn = BIN / "CMakeFiles/drope_ops.dir/src/ops/cudnn_graph.cpp.o"
    if cudnn.exists():
        gcc_objects.append(cudnn)
    for obj in gcc_objects:
        assert compiler_of(obj) == "GCC", obj
    for obj in others:
        assert compiler_of(obj) == ("clang" if clang_build else "GCC"), obj
