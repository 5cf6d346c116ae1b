#!/usr/bin/env python3
"""Sharded data parallelism benchmark (a report, not a test): drope-train on 2 ranks under
`torchrun --no-python` (Gloo, one thread per rank) for every train.shard mode, activation checkpointing off
and on, against one process with the same global batch. Per row: tokens/s over the steps after the warm-up,
the peak bytes of live tensors of rank 0 (DROPE_TRACK_TENSOR_MEMORY), the memory plan's total for that mode,
and the peak RSS of the largest process (GNU time).

  .venv/bin/python bench/shard.py --preset small-50m --seq-len 256 --batch 8 --steps 6 --warmup 2
"""
import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

from benchlib import ROOT, TORCHRUN, run_with_peak_rss, tokens_per_s, train_log, without_launcher

CFG = """run: {{name: bench, out_dir: {out}, seed: 0}}
model: {{preset: {preset}, max_position: {seq}}}
data: {{text: /usr/share/common-licenses, seq_len: {seq}, batch_size: {batch}, micro_batch: {micro}}}
optim: {{lr: 1.0e-3, betas: [0.9, 0.95], weight_decay: 0.1}}
schedule: {{type: constant, warmup: 0}}
train: {{steps: {steps}, log_every: 1, eval_batches: 1, checkpoint_every: 0, clip: 1.0, shard: {shard},
         activation_checkpointing: {ac}}}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="small-50m")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8, help="global batch (sequences per step)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--bin", default=str(ROOT / "build"))
    ap.add_argument("--modes", default="none,optimizer,grads,params",
                    help="shard modes to run (comma-separated); params also runs without the next-block prefetch")
    a = ap.parse_args()
    modes = a.modes.split(",")
    if not modes or any(m not in ("none", "optimizer", "grads", "params") for m in modes):
        sys.exit(f"--modes {a.modes!r}: expected a comma-separated subset of none,optimizer,grads,params")
    if a.batch % a.world or a.warmup >= a.steps:
        sys.exit("--batch must be a multiple of --world and --warmup smaller than --steps")
    train = str(pathlib.Path(a.bin) / "drope-train")
    env = without_launcher()
    env["DROPE_TRACK_TENSOR_MEMORY"] = "1"
    rows = []
    # (ranks, shard, checkpointing, label, extra environment)
    runs = [(1, "none", "none", "none", {})]
    for s in modes:
        for ac in ("none", "full"):
            runs.append((a.world, s, ac, s, {}))
            if s == "params":
                runs.append((a.world, s, ac, "params, no prefetch", {"DROPE_SHARD_PREFETCH": "0"}))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for i, (world, shard, ac, label, extra) in enumerate(runs):
            out = tmp / f"r{i}"
            cfg = tmp / f"r{i}.yaml"
            cfg.write_text(CFG.format(out=out, preset=a.preset, seq=a.seq_len, batch=a.batch, micro=a.batch // world,
                                      steps=a.steps, shard=shard, ac=ac))
            plan = subprocess.run([train, str(cfg), "--plan", "--json", "--world", str(world)], capture_output=True,
                                  text=True, check=True, env=env).stdout
            plan = {j["shard"]: j for j in map(json.loads, plan.splitlines())}[shard]["total"]
            cmd = [train, str(cfg), "--quiet"]
            # one process gets both cores; each of 2 ranks one
            run_env = dict(env, OMP_NUM_THREADS=str(max(1, 2 // world)), **extra)
            if world > 1:
                cmd = [str(TORCHRUN), "--no-python", f"--nproc_per_node={world}", f"--master_port={29950 + i}", *cmd]
            r, rss = run_with_peak_rss(cmd, env=run_env)
            if r.returncode != 0:
                sys.exit(f"run failed ({world} ranks, shard {shard}, checkpointing {ac}):\n{r.stderr[-3000:]}")
            log = train_log(out)
            tps = tokens_per_s(log, a.warmup, a.steps)
            peak = max(l["tensor_bytes"]["peak"] for l in log if "tensor_bytes" in l)
            rows.append((world, label, ac, tps, peak, plan, rss))
            print(rows[-1], flush=True)
    print(f"\n{a.preset}, seq {a.seq_len}, global batch {a.batch}, {a.steps} steps ({a.warmup} warm-up), "
          "2 threads in all")
    print("| ranks | shard | act. ckpt | tokens/s | vs 1 process | tensor peak MiB (rank 0) | plan MiB "
          "| peak RSS MiB (largest process) |")
    print("|---:|---|---|---:|---:|---:|---:|---:|")
    base = rows[0][3]
    for world, shard, ac, tps, peak, plan, rss in rows:
        print(f"| {world} | {shard} | {ac} | {tps:.0f} | {tps / base:.2f}× | {peak / 2**20:.0f} | "
              f"{plan / 2**20:.0f} | {rss:.0f} |")


if __name__ == "__main__":
    main()
