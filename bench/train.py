#!/usr/bin/env python3
"""Training-throughput benchmark (not a test): `drope-train` against the eager PyTorch loop people use
(HF transformers LlamaForCausalLM + torch.optim.AdamW, SDPA attention), same model shape, batch, sequence
length, optimizer and thread count, side by side in one run on this machine. Each side runs in its own
process; tokens/s = tokens of the steps after `--warmup` steps / their wall time (both sides timed the same
way); peak RSS per process.

  .venv/bin/python bench/train.py --preset tiny-256 --seq-len 512 --batch 8 --steps 30 --threads 2
  .venv/bin/python bench/train.py --preset small-50m --vocab 32000 --seq-len 512 --batch 4 --steps 8 --warmup 2

`--isa avx2` (or baseline, avx512) runs both sides at that instruction-set level, emulating a CPU without the
wider ones: drope's kernels (DROPE_CPU_ISA) and LibTorch's own dispatch (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
MKL_ENABLE_INSTRUCTIONS). The level each side actually ran at is printed.

`--ab KEY=VALUE` (repeatable) adds drope-train rows with that config override, side by side with the default
row, each run in turn (`--ab train.fused_loss=false --ab optim.fused=false`); `--no-eager` leaves out the
eager rows.
"""
import argparse
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from benchlib import ROOT, isa_levels, print_result, run_with_peak_rss, run_worker, tokens_per_s, train_log

MALLOC_AS_DROPE = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824"
PASS_THROUGH = ("DROPE_", "ATEN_CPU_CAPABILITY", "ONEDNN_", "DNNL_", "MKL_", "GLIBC_TUNABLES", "OMP_")


def eager_worker(model_dir, seq, batch, steps, warmup, threads, bf16):
    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = AutoConfig.from_pretrained(model_dir)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    other = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95))
    g = torch.Generator().manual_seed(0)
    times = []
    for _ in range(steps):
        x = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=g)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    timed = times[warmup:]
    print_result({"impl": "pytorch-eager (HF Llama, SDPA)", "tokens_per_s": batch * seq * len(timed) / sum(timed),
                  "aten_isa": torch.backends.cpu.get_cpu_capability()})


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny-256", help="model preset (tiny-256, small-50m, ...)")
    ap.add_argument("--vocab", type=int, default=256, help="vocabulary size (the data are bytes: ids < 256)")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast on both sides")
    ap.add_argument("--bin", default=str(ROOT / "build"))
    ap.add_argument("--isa", choices=["native", *isa_levels.levels()], default="native",
                    help="instruction-set level of both sides (default: what this CPU has)")
    ap.add_argument("--ab", action="append", default=[], metavar="KEY=VALUE",
                    help="also run drope-train with this config override (repeatable: one row each)")
    ap.add_argument("--no-eager", action="store_true", help="drope-train rows only")
    ap.add_argument("--eager-worker", nargs=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.eager_worker:
        return eager_worker(args.eager_worker[0], args.seq_len, args.batch, args.steps, args.warmup, args.threads,
                            args.bf16)
    binp = pathlib.Path(args.bin)
    isa_env = isa_levels.levels().get(args.isa, {})
    base_env = {**os.environ, **isa_env}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        # The model shape from our preset, as an HF config.json for the eager side (byte vocabulary: our run
        # trains on this machine's text bytes).
        model_cfg = tmp / "model.yaml"
        model_cfg.write_text(f"model:\n  preset: {args.preset}\n  vocab_size: {args.vocab}\n"
                             f"  max_position: {args.seq_len}\n")
        subprocess.run([binp / "drope-model", "init", "--config", model_cfg, "--out", tmp / "m"], check=True,
                       capture_output=True)
        run_cfg = tmp / "run.yaml"
        run_cfg.write_text(f"""run:
  name: bench
  out_dir: {tmp / 'run'}
  seed: 0
  phase: pretrain
model:
  preset: {args.preset}
  vocab_size: {args.vocab}
  max_position: {args.seq_len}
data:
  text: /usr/share/common-licenses
  seq_len: {args.seq_len}
  batch_size: {args.batch}
optim:
  lr: 1.0e-3
  betas: [0.9, 0.95]
  weight_decay: 0.1
schedule:
  type: constant
  warmup: 0
train:
  steps: {args.steps}
  log_every: 1
  checkpoint_every: 0
  clip: 1.0
  dtype: {'bfloat16' if args.bf16 else 'float32'}
""")
        drope_env = {**{k: v for k, v in base_env.items() if k.startswith(PASS_THROUGH)},
                     "OMP_NUM_THREADS": str(args.threads), "PATH": "/usr/bin:/bin"}
        rows = []
        for i, override in enumerate(["", *args.ab]):
            run_dir = tmp / ("run" if i == 0 else f"run-{i}")
            sets = ["--set", f"run.out_dir={run_dir}", *(["--set", override] if override else [])]
            r, rss = run_with_peak_rss([binp / "drope-train", run_cfg, "--quiet", *sets], env=drope_env)
            if r.returncode != 0:
                raise SystemExit(f"drope-train failed:\n{r.stderr}")
            # Wall time from the end of the warm-up step to the end of the last step (logging included), as the
            # eager side measures it: tokens of the timed steps / their total time.
            rows.append({"impl": "drope-train" + (f" ({override})" if override else ""),
                         "tokens_per_s": tokens_per_s(train_log(run_dir), args.warmup, args.steps),
                         "peak_rss_mb": rss})
        ours = rows[0]
        # The eager loop twice: as users run it, and with the glibc malloc settings drope's tools apply at start
        # (every block on the heap, freed memory kept: apps/app_common.cpp), so that the ratio shows what is
        # left once the allocator is equal.
        eagers = []
        for label, extra_env in () if args.no_eager else (("", {}),
                                                          (", malloc as drope", {"GLIBC_TUNABLES": MALLOC_AS_DROPE})):
            eager = run_worker([sys.executable, __file__, "--eager-worker", tmp / "m", "--seq-len", args.seq_len,
                                "--batch", args.batch, "--steps", args.steps, "--warmup", args.warmup,
                                "--threads", args.threads, *(["--bf16"] if args.bf16 else [])],
                               env={**base_env, **extra_env})
            eager["impl"] += label
            eagers.append(eager)
    print(f"{args.preset} (vocab {args.vocab}), seq {args.seq_len}, batch {args.batch}, "
          f"{args.steps} steps ({args.warmup} warm-up), "
          f"{args.threads} threads, {'bf16 autocast' if args.bf16 else 'float32'}, "
          f"ISA {args.isa}{' (' + ', '.join(f'{k}={v}' for k, v in isa_env.items()) + ')' if isa_env else ''}; "
          f"eager ATen ran at {eagers[0].get('aten_isa', '?') if eagers else '-'}")
    print("| impl | tokens/s | peak RSS MB | drope-train speed-up | drope-train memory |\n|---|---:|---:|---:|---:|")
    for x in rows:
        print(f"| {x['impl']} | {x['tokens_per_s']:.0f} | {x['peak_rss_mb']:.0f} | "
              f"{x['tokens_per_s'] / ours['tokens_per_s']:.2f}x of default | |")
    for x in eagers:
        print(f"| {x['impl']} | {x['tokens_per_s']:.0f} | {x['peak_rss_mb']:.0f} | "
              f"{ours['tokens_per_s'] / x['tokens_per_s']:.2f}x | {ours['peak_rss_mb'] / x['peak_rss_mb']:.2f}x |")

if __name__ == "__main__":
    main()
