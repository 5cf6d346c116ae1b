"""HF transformers on the CPU with attn_implementation="drope" (drope's fused attention through the Python package,
python/) against "sdpa" (LibTorch's scaled_dot_product_attention), side by side in one run, per instruction-set
level: a training step (forward, backward, AdamW) and a long-context prefill of a random Llama model.

    .venv/bin/python bench/hf_attention.py [--isa avx512,avx2] [--quick] [--json runs/bench-hf-attention.json]

A benchmark, not a test: it only reports, after checking that both sides computed the same first loss and the same
prefill logits. Each (level, side) runs in its own worker process (this file again with --worker) with the level's
environment (scripts/lib/isa_levels.txt) and --threads threads, so that neither side inherits the other's warm
caches or peak memory. Needs the package: .venv/bin/pip install --no-build-isolation ./python
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from benchlib import ROOT, isa_levels, print_result, run_worker, write_atomic

SIDES = ("drope", "sdpa")


def model_config(args, impl):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                       num_hidden_layers=args.layers, num_attention_heads=args.heads,
                       num_key_value_heads=args.kv_heads, max_position_embeddings=args.prefill_len,
                       tie_word_embeddings=False, attn_implementation=impl)


def timed(fn, warmup, repeats):
    """The median wall time of `repeats` calls after `warmup` calls, and the first call's result."""
    first = None
    times = []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        r = fn()
        dt = time.perf_counter() - t0
        first = r if i == 0 else first
        if i >= warmup:
            times.append(dt)
    return statistics.median(times), first


def worker(args):
    """One side at one level: a training step's and a prefill's median time, with what the parent compares."""
    import torch

    torch.set_num_threads(args.threads)
    if args.side == "drope":
        import drope.transformers

        drope.transformers.register()
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(model_config(args, args.side))
    g = torch.Generator().manual_seed(1)
    train_ids = torch.randint(0, args.vocab, (args.batch, args.train_len), generator=g)
    prefill_ids = torch.randint(0, args.vocab, (1, args.prefill_len), generator=g)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train_step():
        loss = model(train_ids, labels=train_ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    def prefill():
        with torch.no_grad():
            return model(prefill_ids, use_cache=True, logits_to_keep=1).logits[0, -1]

    model.eval()
    prefill_s, logits = timed(prefill, 1, args.repeats)  # first, on the same fresh weights on both sides
    model.train()
    step_s, first_loss = timed(train_step, args.warmup, args.steps)
    print_result({"side": args.side, "aten_isa": torch.backends.cpu.get_cpu_capability(),
                  "train_step_s": step_s, "train_tokens_per_s": args.batch * args.train_len / step_s,
                  "first_loss": first_loss, "prefill_s": prefill_s,
                  "prefill_tokens_per_s": args.prefill_len / prefill_s, "prefill_logits": logits.tolist()})


def compare(results):
    """Both sides' first loss and prefill logits agree (float32 rounding), else the run stops saying how."""
    a, b = results["drope"], results["sdpa"]
    loss_diff = abs(a["first_loss"] - b["first_loss"]) / abs(b["first_loss"])
    la, lb = a["prefill_logits"], b["prefill_logits"]
    logit_diff = max(abs(x - y) for x, y in zip(la, lb)) / max(abs(y) for y in lb)
    if loss_diff > 1e-4 or logit_diff > 1e-3:
        raise SystemExit(f"drope and sdpa disagree: first loss relative difference {loss_diff:.3g}, prefill logits "
                         f"{logit_diff:.3g}")
    return loss_diff, logit_diff


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--isa", default=",".join(lv for lv in isa_levels.levels() if lv != "baseline"),
                    help="comma-separated levels of scripts/lib/isa_levels.txt, or native (default: all but baseline)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--intermediate", type=int, default=1408)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--train-len", type=int, default=2048)
    ap.add_argument("--prefill-len", type=int, default=8192)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="train 512 and prefill 2048 tokens, 2 steps, 1 repeat")
    ap.add_argument("--json", help="write every number here")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.quick:
        args.train_len, args.prefill_len, args.steps, args.repeats = 512, 2048, 2, 1
    levels = args.isa.split(",")
    sizes = [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items()
             if k in ("threads", "layers", "hidden", "intermediate", "heads", "kv_heads", "vocab", "batch",
                      "train_len", "prefill_len", "steps", "warmup", "repeats")]
    report = {"levels": {}, "args": vars(args)}
    print(f"Llama {args.layers} layers, hidden {args.hidden}, {args.heads} heads / {args.kv_heads} kv heads, "
          f"head dim {args.hidden // args.heads}, float32, {args.threads} threads; train batch {args.batch} x "
          f"{args.train_len} tokens (median of {args.steps} steps), prefill 1 x {args.prefill_len} "
          f"(median of {args.repeats})")
    print("| level | ATen | train tok/s drope | sdpa | drope/sdpa | prefill s drope | sdpa | drope/sdpa |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for level in levels:
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), **isa_levels.levels().get(level, {})}
        results = {side: run_worker([sys.executable, __file__, "--worker", "--side", side, *sizes], env=env)
                   for side in SIDES}
        loss_diff, logit_diff = compare(results)
        d, s = results["drope"], results["sdpa"]
        for r in results.values():
            del r["prefill_logits"]
        report["levels"][level] = {**results, "first_loss_rel_diff": loss_diff, "prefill_logits_rel_diff": logit_diff}
        train = d["train_tokens_per_s"] / s["train_tokens_per_s"]
        print(f"| {level} | {d['aten_isa']} | {d['train_tokens_per_s']:.0f} | {s['train_tokens_per_s']:.0f} | "
              f"{train:.2f}x | {d['prefill_s']:.2f} | {s['prefill_s']:.2f} | {s['prefill_s'] / d['prefill_s']:.2f}x |",
              flush=True)
    if args.json:
        out = ROOT / args.json  # an absolute --json stays as it is
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
