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
    # relocatable: no path of the build tree or of the first prefix in the package's CMake files
    for f in (p / "lib/cmake/drope").iterdir():
        text = f.read_text()
        assert str(ROOT / "build") not in text and "/first/" not in text, f


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
