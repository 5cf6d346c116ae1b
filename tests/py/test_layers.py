"""The layer rule: every library layer (src/<layer>, include/drope/<layer>) includes only its own headers and
those of the layers below it, as declared by the one table in CMakeLists.txt (written to build/layers.json).
The build enforces the same rule with per-layer include views; this test reads every #include as well, so a
file outside any view (or a table that lost a layer) cannot slip through either."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

BIN = Path(os.environ.get("DROPE_BIN", Path(__file__).resolve().parents[2] / "build"))
INCLUDE = re.compile(r'^\s*#\s*include\s*"drope/([A-Za-z0-9_]+)/', re.M)


def load_table():
    path = BIN / "layers.json"
    if not path.is_file():
        pytest.skip(f"{path} missing (configure the build first)")
    return json.loads(path.read_text())


def closure(layers, name):
    seen, todo = {name}, list(layers[name]["deps"])
    while todo:
        d = todo.pop()
        if d not in seen:
            seen.add(d)
            todo.extend(layers[d]["deps"])
    return seen


def violations(root: Path, layers) -> list:
    """(file, included layer) for every #include "drope/<x>/..." that reaches above the file's layer."""
    bad = []
    for name in layers:
        allowed = closure(layers, name)
        for base in (root / "src" / name, root / "include" / "drope" / name):
            if not base.is_dir():
                continue
            for f in sorted(base.rglob("*")):
                if f.suffix not in (".h", ".cpp", ".cu", ".cuh") or not f.is_file():
                    continue
                for inc in INCLUDE.findall(f.read_text(errors="replace")):
                    if inc not in allowed:
                        bad.append((str(f.relative_to(root)), inc))
    return bad


def test_table_is_a_downward_dag():
    layers = load_table()["layers"]
    order = list(layers)
    for i, name in enumerate(order):
        for d in layers[name]["deps"]:
            assert d in layers, f"{name} depends on undeclared layer {d}"
            assert order.index(d) < i, f"{name} depends on {d}, which the table lists after it"
        if not layers[name]["torch"]:
            torch_deps = [d for d in closure(layers, name) if layers[d]["torch"]]
            assert not torch_deps, f"torch-free layer {name} depends on LibTorch layers {torch_deps}"


def test_every_folder_is_a_layer():
    table = load_table()
    root, layers = Path(table["source_dir"]), table["layers"]
    for parent in (root / "src", root / "include" / "drope"):
        folders = {p.name for p in parent.iterdir() if p.is_dir()}
        assert folders <= set(layers), f"{parent}: folders {sorted(folders - set(layers))} are not in the layer table"


def test_no_upward_include():
    table = load_table()
    bad = violations(Path(table["source_dir"]), table["layers"])
    assert not bad, "upward includes (file, layer): " + ", ".join(f"{f} -> {x}" for f, x in bad)


def test_checker_finds_an_upward_include(tmp_path):
    layers = {"core": {"torch": False, "deps": []}, "text": {"torch": False, "deps": ["core"]},
              "tasks": {"torch": False, "deps": ["text"]}}
    (tmp_path / "src" / "core").mkdir(parents=True)
    (tmp_path / "src" / "tasks").mkdir(parents=True)
    (tmp_path / "src" / "core" / "a.cpp").write_text('#include "drope/core/x.h"\n#include "drope/text/y.h"\n')
    (tmp_path / "src" / "tasks" / "b.cpp").write_text('#include "drope/core/x.h"\n  #  include "drope/tasks/z.h"\n')
    assert violations(tmp_path, layers) == [("src/core/a.cpp", "text")]


def compile_in_view(table, layer, header, tmp_path):
    src = tmp_path / "probe.cpp"
    src.write_text(f'#include "drope/{header}"\nint main() {{ return 0; }}\n')
    view = Path(table["layer_include"]) / layer
    return subprocess.run([table["cxx"], "-std=c++17", "-fsyntax-only", "-I", str(view), str(src)],
                          capture_output=True, text=True)


def test_views_reject_an_upward_include_at_compile_time(tmp_path):
    table = load_table()
    up = compile_in_view(table, "core", "text/jsonl.h", tmp_path)
    assert up.returncode != 0 and "drope/text/jsonl.h" in up.stderr, up.stderr
    down = compile_in_view(table, "tasks", "text/jsonl.h", tmp_path)
    assert down.returncode == 0, down.stderr
