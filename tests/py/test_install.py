"""`cmake --install` gives a relocatable package: install the build into one prefix, move the prefix, build
examples/drope-generate against the moved tree with find_package(drope), and run it on a tiny model whose
tokenizer is a SentencePiece model (the text layer then loads its module from the package's lib/drope/). The
installed tools run from the moved prefix too."""
import json
import os
import pathlib
import re
import shutil
import subprocess

import pytest

from conftest import BIN, ROOT, run_cli

PY = ROOT / ".venv" / "bin" / "python"


def run(*cmd, timeout=900, env=None):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, f"{cmd} exited {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
    return r


@pytest.fixture(scope="module")
def moved_prefix(tmp_path_factory):
    base = tmp_path_factory.mktemp("install")
    first, moved = base / "first", base / "moved"
    run("cmake", "--install", BIN, "--prefix", first)
    shutil.move(first, moved)
    return moved


def test_package_layout(moved_prefix):
    p = moved_prefix
    for rel in ("bin/drope-train", "bin/drope-eval", "bin/drope-data", "lib/libdrope_core.a", "lib/libdrope_model.a",
                "lib/drope/libdrope_sentencepiece.so", "include/drope/model/drope.h",
                "lib/cmake/drope/dropeConfig.cmake", "lib/cmake/drope/dropeConfigVersion.cmake",
                "lib/cmake/drope/dropeTargets.cmake", "share/drope/configs"):
        assert (p / rel).exists(), rel
    targets = (p / "lib/cmake/drope/dropeTargets.cmake").read_text()
    # drope::drope and one drope::<layer> with its library per layer of the build's table (DROPE_LAYERS)
    layers = json.loads((BIN / "layers.json").read_text())["layers"]
    assert "formats" in layers
    umbrella = re.search(r'set_target_properties\(drope::drope PROPERTIES.*?INTERFACE_LINK_LIBRARIES "([^"]*)"',
                         targets, re.S)
    assert umbrella, "drope::drope"
    for layer in layers:
        assert f"add_library(drope::{layer} " in targets, layer
        assert f"drope::{layer}" in umbrella.group(1).split(";"), layer
        assert (p / f"lib/libdrope_{layer}.a").exists(), layer
    # relocatable: no path of the source or build tree or of the first prefix in the package's CMake files
    for f in (p / "lib/cmake/drope").iterdir():
        text = f.read_text()
        assert str(ROOT) not in text and "/first/" not in text, f


def test_installed_tool_runs_from_the_moved_prefix(moved_prefix, tmp_path):
    r = run(moved_prefix / "bin/drope-model", "init", "--preset", "micro", "--seed", "0", "--out", tmp_path / "m")
    assert (tmp_path / "m" / "drope.yaml").exists(), r.stdout


def test_example_builds_against_the_moved_package_and_generates(moved_prefix, tmp_path):
    torch_cmake = run(PY, "-c", "import torch; print(torch.utils.cmake_prefix_path)").stdout.strip()
    build = tmp_path / "example"
    env = dict(os.environ, CCACHE_BASEDIR=str(ROOT))
    run("cmake", "-S", ROOT / "examples" / "drope-generate", "-B", build, "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_PREFIX_PATH={moved_prefix};{torch_cmake}", env=env)
    run("cmake", "--build", build, "-j", os.environ.get("DROPE_JOBS", "2"), env=env)
    # a tiny model with a SentencePiece tokenizer trained by drope-data
    corpus = pathlib.Path("/usr/share/common-licenses/GPL-3")
    run_cli("drope-data", "prepare", "--input", corpus, "--paragraphs", "--train-tokenizer", "--vocab-size", "512",
            "--out", tmp_path / "ds")
    model = tmp_path / "model"
    run_cli("drope-model", "init", "--preset", "tiny", "--seed", "0", "--out", model)
    shutil.copy(tmp_path / "ds" / "tokenizer.model", model / "tokenizer.model")
    # LD_DEBUG=files names every library the loader opens: the SentencePiece module must come from the moved
    # package (the build tree also holds one, which a broken lookup would fall back to)
    r = run(build / "drope-generate", model, timeout=120, env=dict(os.environ, LD_DEBUG="files"))
    opened = [line for line in r.stderr.splitlines() if "libdrope_sentencepiece.so" in line and "file=" in line]
    assert opened and all(str(moved_prefix / "lib" / "drope") in line for line in opened), opened
    lines = dict(line.split(":", 1) for line in r.stdout.splitlines() if ":" in line)
    assert set(lines) >= {"as loaded", "DroPE'd", "parameters"}, r.stdout
    ids = lines["as loaded"].strip().split("]")[0].lstrip("[").split()
    assert len(ids) == 8 and all(0 <= int(i) < 1024 for i in ids), r.stdout
    before, after = (int(x) for x in lines["parameters"].split("->"))
    assert after > before  # QK-norm weights were added
    # wrong usage and a missing model: one line, non-zero exit
    bad = subprocess.run([str(build / "drope-generate"), str(tmp_path / "missing")], capture_output=True, text=True)
    assert bad.returncode == 1 and bad.stderr.startswith("error: ") and len(bad.stderr.splitlines()) == 1
    assert subprocess.run([str(build / "drope-generate")], capture_output=True).returncode == 2


CONSUMER = """cmake_minimum_required(VERSION 3.22)
project(consumer CXX)
find_package(drope REQUIRED ${DROPE_COMPONENTS})
file(GENERATE OUTPUT "${CMAKE_BINARY_DIR}/where-$<CONFIG>.txt"
     CONTENT "$<TARGET_LINKER_FILE:drope::core>\\n$<TARGET_LINKER_FILE:drope::model>\\n")
"""


def configure_consumer(prefix, tmp_path, name, *args):
    """Configures (no build) a project that finds the package and writes where its libraries are."""
    src = tmp_path / name
    src.mkdir()
    (src / "CMakeLists.txt").write_text(CONSUMER)
    torch_cmake = run(PY, "-c", "import torch; print(torch.utils.cmake_prefix_path)").stdout.strip()
    return subprocess.run(["cmake", "-S", str(src), "-B", str(src / "b"), "-G", "Ninja",
                           f"-DCMAKE_PREFIX_PATH={prefix};{torch_cmake}", *args],
                          capture_output=True, text=True, timeout=300), src / "b"


@pytest.mark.parametrize("args", [
    ["-DCMAKE_BUILD_TYPE=Debug"],
    ["-DCMAKE_BUILD_TYPE=Debug", "-DCMAKE_MAP_IMPORTED_CONFIG_DEBUG=Debug"],
    ["-DCMAKE_BUILD_TYPE=RelWithDebInfo", "-DCMAKE_MAP_IMPORTED_CONFIG_RELWITHDEBINFO=RelWithDebInfo"],
    ["-DCMAKE_BUILD_TYPE=Debug", "-DDROPE_COMPONENTS=COMPONENTS;model;io"],
])
def test_a_consumer_in_another_configuration_links_the_installed_libraries(moved_prefix, tmp_path, args):
    r, build = configure_consumer(moved_prefix, tmp_path, "c", *args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    config = args[0].split("=")[1]
    where = (build / f"where-{config}.txt").read_text().split()
    assert where == [str(moved_prefix / "lib" / "libdrope_core.a"), str(moved_prefix / "lib" / "libdrope_model.a")]


@pytest.mark.parametrize("components", ["bogus", "model;bogus", "Model"])
def test_an_unknown_component_is_named(moved_prefix, tmp_path, components):
    r, _ = configure_consumer(moved_prefix, tmp_path, "c", f"-DDROPE_COMPONENTS=COMPONENTS;{components}")
    bad = next(c for c in components.split(";") if c != "model")
    err = " ".join(r.stderr.split())  # CMake wraps its messages
    assert r.returncode != 0
    assert f"drope has no component '{bad}'" in err and "its layers: core, config" in err, r.stderr[-3000:]


OPENMP_CONSUMER = """cmake_minimum_required(VERSION 3.22)
project(consumer CXX)
find_package(drope REQUIRED)
file(GENERATE OUTPUT "${CMAKE_BINARY_DIR}/openmp.txt"
     CONTENT "$<TARGET_PROPERTY:drope::openmp,INTERFACE_LINK_LIBRARIES>
$<TARGET_PROPERTY:drope::torch_deps,INTERFACE_LINK_LIBRARIES>
")
"""


@pytest.mark.parametrize("cxx", ["g++", "clang++"])
def test_the_kernels_openmp_is_gccs_libgomp_for_any_consumer_compiler(moved_prefix, tmp_path, cxx):
    """The kernels call libgomp (GCC compiles them in any drope build): a Clang consumer must not get Clang's own
    OpenMP runtime (libomp) beside the torch wheel's libgomp."""
    if not shutil.which(cxx):
        pytest.skip(f"{cxx} is not installed")
    src = tmp_path / "omp"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(OPENMP_CONSUMER)
    torch_cmake = run(PY, "-c", "import torch; print(torch.utils.cmake_prefix_path)").stdout.strip()
    r = subprocess.run(["cmake", "-S", str(src), "-B", str(src / "b"), "-G", "Ninja", f"-DCMAKE_CXX_COMPILER={cxx}",
                        f"-DCMAKE_PREFIX_PATH={moved_prefix};{torch_cmake}"], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    openmp, deps = (src / "b" / "openmp.txt").read_text().splitlines()
    assert "drope::openmp" in deps.split(";"), deps
    if cxx == "g++":
        assert openmp == "OpenMP::OpenMP_CXX"
    else:
        assert openmp.endswith("/libgomp.so") and os.path.isabs(openmp), openmp
