"""The Python package installs with pip into any directory against the venv's torch, the way scripts/setup.sh
installs it: its extension taken from the main build (pip install --no-build-isolation -C
cmake.define.DROPE_PYTHON_FROM_BUILD=build ./python), so that the package build compiles no C++ source; that copy
imports and runs the op. A wrong DROPE_PYTHON_FROM_BUILD is refused at configure time, naming it.

It skips when the main build has no extension (configured with DROPE_PYTHON_EXTENSION=OFF), unless
DROPE_REQUIRE_PYTHON_EXT=1."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DROPE_BIN", ROOT / "build"))

CHECK = """
import pathlib, sys, torch, drope
assert pathlib.Path(drope.__file__).is_relative_to(sys.argv[1]), drope.__file__
q, k, v = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
out = drope.attention(q, k, v, window=3)
rows = torch.arange(5)
mask = (rows[None, :] <= rows[:, None]) & (rows[None, :] > rows[:, None] - 3)
ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
torch.testing.assert_close(out, ref)
print("ok", drope.__file__)
"""


def _cache_value(key):
    for line in (BUILD / "CMakeCache.txt").read_text().splitlines():
        if line.startswith(key + ":"):
            return line.split("=", 1)[1]
    return None


def test_pip_install_from_the_build_compiles_nothing_and_runs(tmp_path):
    if not (BUILD / "CMakeCache.txt").exists() or _cache_value("DROPE_PYTHON_EXTENSION") not in ("ON", "1", "TRUE"):
        if os.environ.get("DROPE_REQUIRE_PYTHON_EXT") == "1":
            pytest.fail(f"{BUILD} has no Python extension (DROPE_PYTHON_EXTENSION=OFF or not configured)")
        pytest.skip(f"{BUILD} has no Python extension (DROPE_PYTHON_EXTENSION=OFF)")
    target, wheel_build = tmp_path / "site", tmp_path / "wheel-build"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--target", str(target),
         "-C", f"build-dir={wheel_build}", "-C", f"cmake.define.DROPE_PYTHON_FROM_BUILD={BUILD}", str(ROOT / "python")],
        capture_output=True, text=True, timeout=1200, cwd=tmp_path,
    )
    assert r.returncode == 0, f"pip install --target failed:\n{r.stdout}\n{r.stderr}"
    installed = sorted(p.name for p in (target / "drope").glob("_C*.so"))
    assert installed == ["_C.so"], installed
    assert (target / "drope" / "_build_info.py").is_file()
    # The package build configured and installed only: not one object file in its own build directory.
    objects = [str(p) for p in wheel_build.rglob("*.o")]
    assert (wheel_build / "CMakeCache.txt").is_file() and not objects, objects
    # The same bytes as the extension the main build made.
    assert (target / "drope" / "_C.so").read_bytes() == (BUILD / "python" / "_C.so").read_bytes()
    env = {**os.environ, "PYTHONPATH": str(target)}
    r = subprocess.run([sys.executable, "-c", CHECK, str(target)], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0, f"the installed copy failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout.startswith("ok")


@pytest.mark.parametrize("case", ["missing", "other-source"])
def test_a_wrong_build_tree_is_refused_naming_it(tmp_path, case):
    tree = tmp_path / "tree"
    tree.mkdir()
    if case == "other-source":  # a configured tree of some other project
        (tree / "CMakeCache.txt").write_text("CMAKE_HOME_DIRECTORY:INTERNAL=/somewhere/else\n"
                                             "DROPE_PYTHON_EXTENSION:BOOL=ON\n")
    r = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tmp_path / "b"), f"-DDROPE_PYTHON_FROM_BUILD={tree}"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    expected = "not a configured build directory" if case == "missing" else "built from /somewhere/else"
    assert f"DROPE_PYTHON_FROM_BUILD={tree}" in r.stderr and expected in r.stderr, r.stderr


def test_a_build_without_the_extension_is_refused(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "CMakeCache.txt").write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={ROOT}\nDROPE_PYTHON_EXTENSION:BOOL=OFF\n")
    r = subprocess.run(["cmake", "-S", str(ROOT), "-B", str(tmp_path / "b"), f"-DDROPE_PYTHON_FROM_BUILD={tree}"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0 and "configured with DROPE_PYTHON_EXTENSION=OFF" in r.stderr, r.stderr
