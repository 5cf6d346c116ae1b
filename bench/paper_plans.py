#!/usr/bin/env python3
"""The memory plan of every paper config on 8 x 80 GB, as the Markdown table of docs/gpu-cluster.md.

For each config in PAPER: `drope-train CONFIG --plan --json --world 8 --set run.init=configs/hf/<model>` (the
model's public config.json, no weights), the total bytes per rank of every train.shard mode at the config's
micro-batch and activation checkpointing, the mode the config chose and the largest micro-batch that mode fits.
A config's choice is the least sharded mode whose total stays within HEADROOM of the device
(tests/py/test_paper_configs.py checks that, and that docs/gpu-cluster.md shows this table).

  .venv/bin/python bench/paper_plans.py [--bin build]
"""
import argparse
import json
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
WORLD = 8
GPU_GB = 80
HEADROOM = 0.9  # a config's plan may use at most this fraction of the device (allocator slack, CUDA context)
MODES = ("none", "optimizer", "grads", "params")
# config (configs/train/<name>.yaml) -> the HF config.json it plans with (configs/hf/<dir>/config.json)
PAPER = {
    "smollm-360m-drope": "SmolLM-360M",
    "smollm-1.7b-drope": "SmolLM-1.7B",
    "smollm-1.7b-drope-qknorm": "SmolLM-1.7B",
    "smollm2-1.7b-drope": "SmolLM2-1.7B",
    "smollm2-1.7b-drope-qknorm": "SmolLM2-1.7B",
    "llama2-7b-drope": "Llama-2-7b-hf",
    "llama2-7b-drope-qknorm": "Llama-2-7b-hf",
}


def plan(bin_dir, name):
    """(parameters line, resolved config, {mode: plan json}) of one paper config at world 8."""
    train = str(pathlib.Path(bin_dir) / "drope-train")
    cfg = ROOT / "configs" / "train" / f"{name}.yaml"
    init = ["--set", f"run.init={ROOT / 'configs' / 'hf' / PAPER[name]}"]

    def run(*a):
        return subprocess.run([train, str(cfg), *init, *a], capture_output=True, text=True, check=True).stdout

    modes = {j["shard"]: j for j in map(json.loads, run("--plan", "--json", "--world", str(WORLD),
                                                          "--gpu-mem-gb", str(GPU_GB)).splitlines())}
    header = run("--plan", "--world", str(WORLD)).splitlines()[1]
    params = re.search(r"([0-9.]+[MB]) parameters", header).group(1)
    return params, run("--print-config"), modes


def table(bin_dir):
    import yaml


    def gib(b):
        return f"{b / 2**30:.1f}"

    rows = ["| config | parameters | seq × micro-batch | act. ckpt | "
            + " | ".join(f"{m} GiB" for m in MODES) + " | chosen | largest micro-batch |",
            "|---|---:|---:|---|" + "---:|" * len(MODES) + "---|---:|"]
    for name in PAPER:
        params, resolved, modes = plan(bin_dir, name)
        c = yaml.safe_load(resolved)
        chosen = c["train"]["shard"]
        cells = [f"**{gib(modes[m]['total'])}**" if m == chosen else gib(modes[m]["total"]) for m in MODES]
        rows.append(f"| {name} | {params} | {c['data']['seq_len']} × {c['data']['micro_batch']} | "
                    f"{c['train']['activation_checkpointing']} | " + " | ".join(cells)
                    + f" | {chosen} | {modes[chosen]['largest_micro_batch']} |")
    return "\n".join(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=str(ROOT / "build"))
    a = ap.parse_args()
    if not (pathlib.Path(a.bin) / "drope-train").is_file():
        sys.exit(f"--bin: {a.bin}/drope-train not found (build first: bash scripts/setup.sh)")
    print(table(a.bin))


if __name__ == "__main__":
    main()
