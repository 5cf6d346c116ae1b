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
import statistics
import subprocess
import sys
from dataclasses import dataclass, field

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


# ---- interleaved rounds ---------------------------------------------------------------------------------------
# On a shared machine one run per side cannot support a ratio: another job starting halfway moves it by 2×. The
# sides run interleaved instead (round 1: A B C, round 2: A B C, ...), each round a fresh run of every side, and the
# reports are medians over rounds; the ratio of two sides is taken per round (both measured minutes apart) and
# summarised by its median and range.


@dataclass
class SideRun:
    """One side's run in one round: the wall seconds of each timed step and the tokens of one step."""

    step_s: list[float]
    tokens_per_step: int
    extra: dict = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step * len(self.step_s) / sum(self.step_s)

    @property
    def spread(self) -> float:
        """Slowest over fastest timed step: 1.0 on a quiet machine, larger when something else took the cores."""
        return max(self.step_s) / min(self.step_s)


def run_interleaved(sides: dict, rounds: int, on_run=None) -> list[dict]:
    """Runs every side once per round, in the order given (A B C, A B C, ...); returns one {side: SideRun} per
    round. `sides` maps a name to a callable returning a SideRun; `on_run(round, name, run)` sees each result."""
    out = []
    for r in range(rounds):
        row = {}
        for name, run in sides.items():
            row[name] = run()
            if on_run:
                on_run(r, name, row[name])
        out.append(row)
    return out


def median(xs) -> float:
    return statistics.median(xs)


@dataclass
class RoundSummary:
    """Medians over rounds: per side tokens/s (median, min, max), per pair the per-round ratio (median, min, max),
    and the rounds flagged busy (a side's step-time spread above the threshold)."""

    sides: dict
    ratios: dict
    busy_rounds: list
    spreads: list


def summarize(rounds: list[dict], pairs: list[tuple[str, str]], busy_spread: float = 1.25) -> RoundSummary:
    """Summarises interleaved rounds. `pairs` (a, b): the per-round speed ratio tokens/s(a) / tokens/s(b). A round
    is busy when any side's slowest timed step took more than `busy_spread` × its fastest: a step-to-step swing
    that size on fixed work means the cores were shared for part of that run."""
    names = list(rounds[0])
    sides = {}
    for n in names:
        tps = [row[n].tokens_per_s for row in rounds]
        sides[n] = (median(tps), min(tps), max(tps))
    ratios = {}
    for a, b in pairs:
        rs = [row[a].tokens_per_s / row[b].tokens_per_s for row in rounds]
        ratios[(a, b)] = (median(rs), min(rs), max(rs))
    spreads = [max(row[n].spread for n in names) for row in rounds]
    busy = [i for i, s in enumerate(spreads) if s > busy_spread]
    return RoundSummary(sides, ratios, busy, spreads)


def format_summary(s: RoundSummary, unit: str = "tokens/s") -> str:
    """The summary as two Markdown tables (sides; ratios) and a line naming the busy rounds."""
    lines = [f"| side | median {unit} | range |", "|---|---:|---:|"]
    lines += [f"| {n} | {m:.0f} | {lo:.0f}–{hi:.0f} |" for n, (m, lo, hi) in s.sides.items()]
    lines += ["", "| ratio (per round) | median | range |", "|---|---:|---:|"]
    lines += [f"| {a} / {b} | {m:.2f}× | {lo:.2f}–{hi:.2f}× |" for (a, b), (m, lo, hi) in s.ratios.items()]
    spreads = ", ".join(f"{x:.2f}" for x in s.spreads)
    busy = ", ".join(str(i + 1) for i in s.busy_rounds) or "none"
    lines += ["", f"rounds {len(s.spreads)}; step-time spread (slowest / fastest step) per round: {spreads}; "
              f"busy rounds: {busy}"]
    return "\n".join(lines)


def step_seconds(log: list[dict], first: int, last: int) -> list[float]:
    """Wall seconds of each of steps first + 1 .. last of a drope-train log.jsonl (logged every step)."""
    at = {rec["step"]: rec["elapsed_s"] for rec in log if "elapsed_s" in rec}
    return [at[s] - at[s - 1] for s in range(first + 1, last + 1)]
