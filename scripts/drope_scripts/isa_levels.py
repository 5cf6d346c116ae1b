"""The instruction-set levels and the environment that caps drope's CPU kernels and LibTorch's own dispatch at
each, read from the one table scripts/lib/isa_levels.txt (scripts/lib/isa_env.sh reads it for bash)."""
from __future__ import annotations

import os
import pathlib
import subprocess

TABLE = pathlib.Path(__file__).resolve().parents[1] / "lib" / "isa_levels.txt"


def levels() -> dict[str, dict[str, str]]:
    """{level: {variable: value}} in the table's order (widest first)."""
    out = {}
    for line in TABLE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            level, *assignments = line.split()
            out[level] = dict(a.split("=", 1) for a in assignments)
    return out


def env(level: str) -> dict[str, str]:
    """The environment of one level; ValueError naming the levels there are for any other name."""
    table = levels()
    if level not in table:
        raise ValueError(f"unknown level '{level}' (expected {', '.join(table)})")
    return table[level]


def describe(level: str) -> str:
    """The level's environment as `A=1 B=2`, as scripts/lib/isa_env.sh prints it."""
    return " ".join(f"{k}={v}" for k, v in env(level).items())


def runs(bin_dir: pathlib.Path, level: str) -> str | None:
    """None when drope's kernels run at `level` on this CPU (a 16-token attention through drope-bench), else the
    tool's refusal."""
    r = subprocess.run([str(bin_dir / "drope-bench"), "attention", "--lengths", "16", "--cases", "causal", "--impls",
                        "ours", "--repeats", "1", "--warmup", "0", "--quiet"], capture_output=True, text=True,
                       env={**os.environ, "DROPE_CPU_ISA": level})
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[0]
