"""The Python package installs with pip into any directory against the venv's torch
(pip install --no-build-isolation --target DIR ./python), and that copy imports and runs the op.

It reuses the build directory of the documented install (build-python/), so it skips when the package was never built
here (a first build takes minutes), unless DROPE_REQUIRE_PYTHON_EXT=1."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

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


def test_pip_install_target_runs_the_op(tmp_path):
    if not (ROOT / "build-python" / "CMakeCache.txt").exists() and os.environ.get("DROPE_REQUIRE_PYTHON_EXT") != "1":
        pytest.skip("the package was never built here: .venv/bin/pip install --no-build-isolation ./python")
    target = tmp_path / "site"
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--target", str(target),
         str(ROOT / "python")],
        capture_output=True, text=True, timeout=1200, cwd=tmp_path,
    )
    assert r.returncode == 0, f"pip install --target failed:\n{r.stdout}\n{r.stderr}"
    assert sorted(p.name for p in (target / "drope").glob("_C*.so")), "no extension library installed"
    env = {**os.environ, "PYTHONPATH": str(target)}
    r = subprocess.run([sys.executable, "-c", CHECK, str(target)], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path, env=env)
    assert r.returncode == 0, f"the installed copy failed:\n{r.stdout}\n{r.stderr}"
    assert r.stdout.startswith("ok")
