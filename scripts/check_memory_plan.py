#!/usr/bin/env python3
"""Measure drope-train's peak memory on CPU runs and compare it with `drope-train --plan` (issue 17).

For each configuration: the plan's total for the configured shard mode, and the measured peak RSS (VmHWM, via
GNU time) of a 2-step run minus the peak RSS of a 1-step run of the micro model with the same binary (the
runtime's own memory: LibTorch's code, thread pools, allocator slack). Prints a Markdown table. Usage:
    .venv/bin/python scripts/check_memory_plan.py [--bin build] [--out docs/results/memory-plan.md]
Timings are not asserted anywhere; this is a report.
"""
import argparse
import json
import shutil
import os
import pathlib
import subprocess
import sys
import tempfile

CFG = """run: {{name: m, out_dir: {out}, seed: 0}}
model: {{preset: {preset}, max_position: {seq}}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: {seq}, batch_size: {batch}, micro_batch: {micro}}}
optim: {{lr: 1.0e-4}}
train: {{steps: {steps}, log_every: 1, eval_batches: 1, checkpoint_every: 0, shard: {shard},
         activation_checkpointing: {ac}, chunked_loss: true}}
"""

CASES = [
    # (preset, seq, micro, shard, activation checkpointing)
    ("small-50m", 256, 4, "none", "none"),
    ("small-50m", 256, 4, "none", "full"),
    ("tiny-256", 1024, 8, "none", "none"),
    ("tiny-256", 1024, 8, "optimizer", "2"),
]


def peak_kb(cmd, env, run_dir):
    shutil.rmtree(run_dir, ignore_errors=True)  # our own temporary run directory: each measurement starts fresh
    r = subprocess.run(["/usr/bin/time", "-f", "%M", *cmd], env=env, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return int(r.stderr.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    train = str(pathlib.Path(a.bin) / "drope-train")
    # glibc keeps freed large blocks in its heap once its mmap threshold has grown (up to 32 MB), so peak RSS
    # would count its retention policy; a fixed threshold returns every large block to the OS when freed, and
    # peak RSS then follows the live bytes (the same setting for the baseline and every run).
    env = dict(os.environ, OMP_NUM_THREADS="2")
    live = dict(env, MALLOC_MMAP_THRESHOLD_="65536")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        base_cfg = tmp / "base.yaml"
        base_cfg.write_text(CFG.format(out=tmp / "base", preset="micro", seq=32, batch=1, micro=1, steps=1, shard="none",
                                       ac="none"))
        base = peak_kb([train, str(base_cfg), "--quiet"], env, tmp / "base") * 1024
        base_live = peak_kb([train, str(base_cfg), "--quiet"], live, tmp / "base") * 1024
        for i, (preset, seq, micro, shard, ac) in enumerate(CASES):
            cfg = tmp / f"c{i}.yaml"
            cfg.write_text(CFG.format(out=tmp / f"c{i}", preset=preset, seq=seq, batch=micro, micro=micro, steps=2,
                                      shard=shard, ac=ac))
            plan = subprocess.run([train, str(cfg), "--plan", "--json", "--world", "1"], env=env, capture_output=True,
                                  text=True, check=True).stdout
            plan = {j["shard"]: j for j in map(json.loads, plan.splitlines())}[shard]
            measured = peak_kb([train, str(cfg), "--quiet"], env, tmp / f"c{i}") * 1024 - base
            measured_live = peak_kb([train, str(cfg), "--quiet"], live, tmp / f"c{i}") * 1024 - base_live
            rows.append((preset, seq, micro, shard, ac, plan["total"], measured, measured_live))
    lines = [f"runtime baseline (micro model, 1 step): {base / 2**20:.0f} MiB peak RSS ({base_live / 2**20:.0f} MiB with "
             "MALLOC_MMAP_THRESHOLD_=65536), subtracted", "",
             "| model | seq | micro-batch | shard | act. ckpt | plan MiB | measured MiB (glibc default) | plan / measured − 1 "
             "| measured MiB (fixed mmap threshold: live bytes) | plan / measured − 1 |",
             "|---|---:|---:|---|---|---:|---:|---:|---:|---:|"]
    for p, s, m, sh, ac, pl, me, ml in rows:
        lines.append(f"| {p} | {s} | {m} | {sh} | {ac} | {pl / 2**20:.0f} | {me / 2**20:.0f} | {100 * (pl / me - 1):+.1f} % "
                     f"| {ml / 2**20:.0f} | {100 * (pl / ml - 1):+.1f} % |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        out = pathlib.Path(a.out)
        tmpf = out.with_name(f".{out.name}.tmp{os.getpid()}")
        tmpf.write_text(text)
        tmpf.replace(out)


if __name__ == "__main__":
    main()
