#!/usr/bin/env python3
"""Measure drope-train's peak memory on CPU runs and compare it with `drope-train --plan`.

For each configuration (world 1, or 2 ranks under `torchrun --no-python`), a 2-step run with
DROPE_TRACK_TENSOR_MEMORY=1: LibTorch's CPU allocator is wrapped and counts the bytes of live tensors, and rank 0
logs their peak (`tensor_bytes.peak` in log.jsonl). That is what the plan models (parameters, gradients,
moments, activations, logits, buffers), so the plan is checked against it. Beside it, the peak RSS (VmHWM via
GNU time: the largest process) minus the peak RSS of a 1-step run of the micro model (LibTorch's code, thread
pools, allocator slack) is shown for reference; glibc keeps freed blocks (its mmap threshold grows to 32 MB),
so RSS also counts its retention policy. Prints a Markdown table. Usage:
    .venv/bin/python bench/memory_plan.py [--bin build] [--out runs/memory-plan.md]
This is a report; tests/py/test_memory_plan.py checks the plan against the same counter at small shapes.
"""
import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

from benchlib import TORCHRUN, run_with_peak_rss, train_log, without_launcher, write_atomic

CFG = """run: {{name: m, out_dir: {out}, seed: 0}}
model: {{preset: {preset}, max_position: {seq}}}
data: {{text: /usr/share/common-licenses/GPL-3, seq_len: {seq}, batch_size: {batch}, micro_batch: {micro}}}
optim: {{lr: 1.0e-4}}
train: {{steps: {steps}, log_every: 1, eval_batches: 1, checkpoint_every: 0, shard: {shard},
         activation_checkpointing: {ac}, chunked_loss: true}}
"""

CASES = [
    # (preset, seq, micro-batch per rank, world, shard, activation checkpointing)
    ("small-50m", 256, 4, 1, "none", "none"),
    ("small-50m", 256, 4, 1, "none", "full"),
    ("tiny-256", 1024, 8, 1, "none", "none"),
    ("tiny-256", 1024, 8, 2, "optimizer", "2"),
    ("small-50m", 256, 4, 2, "grads", "none"),
    ("small-50m", 256, 4, 2, "params", "full"),
]


def run(cmd, env, run_dir, world):
    shutil.rmtree(run_dir, ignore_errors=True)  # our own temporary run directory: each measurement starts fresh
    if world > 1:
        cmd = [str(TORCHRUN), "--no-python", f"--nproc_per_node={world}", "--master_port=29931", *cmd]
    r, rss_mib = run_with_peak_rss(cmd, env=env)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    rss = round(rss_mib * 2**20)
    peaks = [r.get("tensor_bytes", {}).get("peak") for r in train_log(run_dir)]
    peaks = [p for p in peaks if p is not None]
    return rss, (max(peaks) if peaks else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default="build")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    train = str(pathlib.Path(a.bin) / "drope-train")
    env = dict(without_launcher(), OMP_NUM_THREADS="1", DROPE_TRACK_TENSOR_MEMORY="1")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        base_cfg = tmp / "base.yaml"
        base_cfg.write_text(CFG.format(out=tmp / "base", preset="micro", seq=32, batch=1, micro=1, steps=1,
                                       shard="none",
                                       ac="none"))
        base, _ = run([train, str(base_cfg), "--quiet"], env, tmp / "base", 1)
        for i, (preset, seq, micro, world, shard, ac) in enumerate(CASES):
            cfg = tmp / f"c{i}.yaml"
            cfg.write_text(CFG.format(out=tmp / f"c{i}", preset=preset, seq=seq, batch=micro * world, micro=micro,
                                      steps=2, shard=shard, ac=ac))
            plan = subprocess.run([train, str(cfg), "--plan", "--json", "--world", str(world)], env=env,
                                  capture_output=True, text=True, check=True).stdout
            plan = {j["shard"]: j for j in map(json.loads, plan.splitlines())}[shard]
            rss, tensors = run([train, str(cfg), "--quiet"], env, tmp / f"c{i}", world)
            rows.append((preset, seq, micro, world, shard, ac, plan, tensors, rss - base))
            print(rows[-1][:6], plan["total"], tensors, rss - base, flush=True)

    def mib(b):
        return f"{b / 2**20:.0f}"

    lines = [f"Runtime baseline subtracted from RSS (micro model, 1 step): {mib(base)} MiB. Rank 0's counters.", "",
             "| model | seq | micro-batch | world | shard | act. ckpt | plan MiB | tensor peak MiB "
             "| plan / tensor peak − 1 | peak RSS − baseline MiB | plan / RSS − 1 |",
             "|---|---:|---:|---:|---|---|---:|---:|---:|---:|---:|"]
    for p, s, m, w, sh, ac, plan, t, r in rows:
        lines.append(f"| {p} | {s} | {m} | {w} | {sh} | {ac} | {mib(plan['total'])} | {mib(t)} | "
                     f"{100 * (plan['total'] / t - 1):+.1f} % | {mib(r)} | {100 * (plan['total'] / r - 1):+.1f} % |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        write_atomic(pathlib.Path(a.out), text)


if __name__ == "__main__":
    main()
