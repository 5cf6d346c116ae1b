"""What the benchmarks share. They run as files (`.venv/bin/python bench/NAME.py`), so this module is a sibling
import; it puts scripts/ on the path for the shared library drope_scripts (the ISA table, atomic writes).

A benchmark that compares drope against a Python implementation runs that side in a worker: the same file
started again with a hidden worker flag (`run_worker`), which prints one JSON object as its last line
(`print_result`, with the worker's own peak RSS). One process per side keeps each side's peak memory its own.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from drope_scripts import isa_levels  # noqa: E402
from drope_scripts.atomic import write_atomic  # noqa: E402

TORCHRUN = pathlib.Path(sys.executable).parent / "torchrun"
LAUNCHER_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")

__all__ = ["LAUNCHER_VARS", "ROOT", "TORCHRUN", "isa_levels", "write_atomic"]


def vm_hwm_mb() -> float:
    """Peak RSS of this process in MiB. Not ru_maxrss: Linux carries it across execve from the parent."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def print_result(result: dict) -> None:
    """A worker's last line: its result as JSON, with the worker's peak RSS (`peak_rss_mb`) added."""
    print(json.dumps({**result, "peak_rss_mb": vm_hwm_mb()}), flush=True)


def run_worker(cmd: list, env: dict | None = None, line: int = -1) -> dict:
    """Runs a worker (a benchmark file again with its worker flag, or a tool that prints JSON) and returns the JSON
    object on its stdout line `line` (default the last); exits naming the command and its stderr if it fails."""
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed:\n{r.stderr}")
    return json.loads(r.stdout.strip().splitlines()[line])


def run_with_peak_rss(cmd: list, env: dict | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Runs cmd under GNU time; returns the finished process and the peak RSS of its largest process in MiB (NaN
    if it failed: the caller checks returncode)."""
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *map(str, cmd)], capture_output=True, text=True, env=env)
    rss = int(r.stderr.strip().splitlines()[-1]) / 1024 if r.returncode == 0 else float("nan")
    return r, rss


def train_log(run_dir: pathlib.Path) -> list[dict]:
    """The records of a drope-train run's log.jsonl."""
    return [json.loads(line) for line in (pathlib.Path(run_dir) / "log.jsonl").read_text().splitlines()]


def tokens_per_s(log: list[dict], first: int, last: int) -> float:
    """Training throughput from the end of step `first` to the end of step `last` (logging included): the tokens of
    those steps over their wall time."""
    at = {rec["step"]: rec for rec in log if "elapsed_s" in rec}
    a, b = at[first], at[last]
    return (b["tokens"] - a["tokens"]) / (b["elapsed_s"] - a["elapsed_s"])


def without_launcher(env: dict | None = None) -> dict:
    """The environment (default os.environ) without a surrounding torchrun's rank variables."""
    return {k: v for k, v in (os.environ if env is None else env).items() if k not in LAUNCHER_VARS}
