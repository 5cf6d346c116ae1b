#!/usr/bin/env python3
"""Training-throughput benchmark (not a test): `drope-train` against the PyTorch loops people use (HF transformers
LlamaForCausalLM + torch.optim.AdamW, SDPA attention; eager, or under `torch.compile`), each in float32 or bf16
(drope-train `train.dtype: bfloat16`; PyTorch bf16 autocast), same model shape, batch, sequence length, optimizer
and thread count.

The sides run interleaved over `--rounds` rounds (round 1: every side once, in the order of `--sides`; round 2: again;
...), each run a fresh process; tokens/s = tokens of the steps after `--warmup` / their wall time. Reported: each
side's median tokens/s and range over rounds, and for each pair the median and range of the per-round ratio (the two
sides measured minutes apart). A round in which some side's slowest timed step took more than `--busy-spread` × its
fastest is flagged busy (something else took the cores during it); load averages are printed per round.

  .venv/bin/python bench/train.py --preset tiny-256 --seq-len 512 --batch 8 --steps 12 --warmup 2 --rounds 3
  .venv/bin/python bench/train.py --preset small-50m --vocab 32000 --seq-len 512 --batch 4 --steps 8 --warmup 2

Sides: drope-fp32, drope-bf16, eager-fp32, eager-bf16, compiled-fp32, compiled-bf16, eager-fp32-malloc (eager with
the glibc malloc settings drope's tools apply at start). `--peak` first runs `drope-bench peak` at the same thread
count and ISA and adds each side's share of the measured GEMM roof of its dtype (model FLOPs 6N + 12·L·C·T per
token, N the non-embedding parameters, as drope-train's MFU).

`--isa avx2` (or baseline, avx512) runs every side at that instruction-set level, emulating a CPU without the wider
ones: drope's kernels (DROPE_CPU_ISA) and LibTorch's own dispatch (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA,
MKL_ENABLE_INSTRUCTIONS). `--ab KEY=VALUE` (repeatable) adds a drope-train float32 side with that config override.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from benchlib import (
    ROOT,
    SideRun,
    format_summary,
    isa_levels,
    print_result,
    run_interleaved,
    run_with_peak_rss,
    run_worker,
    step_seconds,
    summarize,
    train_log,
)

MALLOC_AS_DROPE = "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=1073741824"
PASS_THROUGH = ("DROPE_", "ATEN_CPU_CAPABILITY", "ONEDNN_", "DNNL_", "MKL_", "GLIBC_TUNABLES", "OMP_")
SIDES = ("drope-fp32", "drope-bf16", "eager-fp32", "eager-bf16", "compiled-fp32", "compiled-bf16",
         "eager-fp32-malloc")
DEFAULT_SIDES = "drope-fp32,drope-bf16,eager-fp32,eager-bf16,compiled-fp32,compiled-bf16"
# The ratios reported when both sides ran: drope against itself and against PyTorch in the same dtype.
PAIRS = (("drope-bf16", "drope-fp32"), ("drope-bf16", "eager-bf16"), ("drope-bf16", "compiled-bf16"),
         ("drope-fp32", "eager-fp32"), ("drope-fp32", "compiled-fp32"), ("drope-fp32", "eager-fp32-malloc"),
         ("eager-bf16", "eager-fp32"), ("compiled-bf16", "compiled-fp32"))


def torch_worker(model_dir, seq, batch, steps, threads, bf16, compiled):
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
    fwd = torch.compile(model) if compiled else model
    g = torch.Generator().manual_seed(0)
    times = []
    for _ in range(steps):
        x = torch.randint(0, cfg.vocab_size, (batch, seq + 1), generator=g)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = fwd(x[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, logits.size(-1)), x[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    print_result({"step_s": times, "aten_isa": torch.backends.cpu.get_cpu_capability()})


def flops_per_token(model_dir, seq):
    """6N + 12·L·C·T with N the parameters but the token embedding (drope-train's MFU estimate)."""
    import torch
    from transformers import AutoConfig, LlamaForCausalLM

    cfg = AutoConfig.from_pretrained(model_dir)
    with torch.device("meta"):
        n = sum(p.numel() for p in LlamaForCausalLM(cfg).parameters())
    n -= cfg.vocab_size * cfg.hidden_size
    return 6.0 * n + 12.0 * cfg.num_hidden_layers * cfg.hidden_size * seq


def run_config(args, tmp):
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
""")
    return run_cfg


def make_sides(args, tmp, base_env):
    """{name: callable returning a SideRun} for the chosen sides, in their order."""
    binp = pathlib.Path(args.bin)
    run_cfg = run_config(args, tmp)
    tokens = args.batch * args.seq_len
    drope_env = {**{k: v for k, v in base_env.items() if k.startswith(PASS_THROUGH)},
                 "OMP_NUM_THREADS": str(args.threads), "PATH": "/usr/bin:/bin"}
    counter = iter(range(1 << 30))

    def drope(dtype, override=""):
        def run():
            run_dir = tmp / f"run-{next(counter)}"
            sets = ["--set", f"run.out_dir={run_dir}", "--set", f"train.dtype={dtype}",
                    *(["--set", override] if override else [])]
            r, rss = run_with_peak_rss([binp / "drope-train", run_cfg, "--quiet", *sets], env=drope_env)
            if r.returncode != 0:
                raise SystemExit(f"drope-train failed:\n{r.stderr}")
            steps = step_seconds(train_log(run_dir), args.warmup, args.steps)
            subprocess.run(["rm", "-rf", str(run_dir)], check=False)
            # bf16 where the CPU's bf16 GEMMs are emulated computes in float32 (drope-train says so at start).
            computes = "float32" if dtype == "float32" or "computes in float32" in r.stderr + r.stdout else dtype
            return SideRun(steps, tokens, {"peak_rss_mb": rss, "computes_in": computes})
        return run

    def torch_side(bf16, compiled, extra_env=None):
        def run():
            r = run_worker([sys.executable, __file__, "--torch-worker", tmp / "m", "--seq-len", args.seq_len,
                            "--batch", args.batch, "--steps", args.steps, "--threads", args.threads,
                            *(["--bf16"] if bf16 else []), *(["--compiled"] if compiled else [])],
                           env={**base_env, **(extra_env or {})})
            return SideRun(r["step_s"][args.warmup:], tokens, {"peak_rss_mb": r["peak_rss_mb"],
                                                               "aten_isa": r["aten_isa"]})
        return run

    table = {"drope-fp32": drope("float32"), "drope-bf16": drope("bfloat16"),
             "eager-fp32": torch_side(False, False), "eager-bf16": torch_side(True, False),
             "compiled-fp32": torch_side(False, True), "compiled-bf16": torch_side(True, True),
             "eager-fp32-malloc": torch_side(False, False, {"GLIBC_TUNABLES": MALLOC_AS_DROPE})}
    sides = {}
    for name in args.sides.split(","):
        if name not in table:
            raise SystemExit(f"--sides: unknown side '{name}' (known: {', '.join(SIDES)})")
        sides[name] = table[name]
    for override in args.ab:
        sides[f"drope-fp32 ({override})"] = drope("float32", override)
    return sides


def measured_roofs(args, env):
    """GFLOP/s per dtype from `drope-bench peak` at the benchmark's threads and ISA."""
    out = subprocess.run([str(pathlib.Path(args.bin) / "drope-bench"), "peak", "--threads", str(args.threads),
                          "--json", "-"], capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise SystemExit(f"drope-bench peak failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])["roof_gflops"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="tiny-256", help="model preset (tiny-256, small-50m, ...)")
    ap.add_argument("--vocab", type=int, default=256, help="vocabulary size (the data are bytes: ids < 256)")
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (each side runs once per round)")
    ap.add_argument("--sides", default=DEFAULT_SIDES, help=f"comma-separated, in run order ({', '.join(SIDES)})")
    ap.add_argument("--busy-spread", type=float, default=1.25,
                    help="flag a round in which a side's slowest step took more than this × its fastest")
    ap.add_argument("--peak", action="store_true", help="also the share of drope-bench peak's roof per dtype")
    ap.add_argument("--bin", default=str(ROOT / "build"))
    ap.add_argument("--isa", choices=["native", *isa_levels.levels()], default="native",
                    help="instruction-set level of every side (default: what this CPU has)")
    ap.add_argument("--ab", action="append", default=[], metavar="KEY=VALUE",
                    help="also run drope-train float32 with this config override (repeatable: one side each)")
    ap.add_argument("--json", help="write every round's numbers here")
    ap.add_argument("--torch-worker", nargs=1, help=argparse.SUPPRESS)
    ap.add_argument("--bf16", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--compiled", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(args.torch_worker[0], args.seq_len, args.batch, args.steps, args.threads, args.bf16,
                            args.compiled)
    if args.warmup >= args.steps - 1:
        raise SystemExit("--warmup must leave at least two timed steps")
    isa_env = isa_levels.levels().get(args.isa, {})
    base_env = {**os.environ, **isa_env}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        # The model shape from our preset, as an HF config.json for the PyTorch sides.
        model_cfg = tmp / "model.yaml"
        model_cfg.write_text(f"model:\n  preset: {args.preset}\n  vocab_size: {args.vocab}\n"
                             f"  max_position: {args.seq_len}\n")
        subprocess.run([pathlib.Path(args.bin) / "drope-model", "init", "--config", model_cfg, "--out", tmp / "m"],
                       check=True, capture_output=True)
        fpt = flops_per_token(tmp / "m", args.seq_len)
        roofs = measured_roofs(args, {**base_env, "OMP_NUM_THREADS": str(args.threads)}) if args.peak else None
        sides = make_sides(args, tmp, base_env)
        loads = []

        def on_run(r, name, run):
            if name == next(iter(sides)):
                loads.append(os.getloadavg()[0])
            print(f"round {r + 1} {name}: {run.tokens_per_s:.0f} tokens/s (spread {run.spread:.2f})",
                  file=sys.stderr, flush=True)

        rounds = run_interleaved(sides, args.rounds, on_run)
    pairs = [p for p in PAIRS if p[0] in sides and p[1] in sides]
    pairs += [(n, "drope-fp32") for n in sides if n.startswith("drope-fp32 (") and "drope-fp32" in sides]
    s = summarize(rounds, pairs, args.busy_spread)
    isa_note = f" ({', '.join(f'{k}={v}' for k, v in isa_env.items())})" if isa_env else ""
    print(f"{args.preset} (vocab {args.vocab}), seq {args.seq_len}, batch {args.batch}, {args.steps} steps "
          f"({args.warmup} warm-up), {args.threads} threads, ISA {args.isa}{isa_note}, {args.rounds} interleaved "
          f"rounds; 1-min load average at each round's start: {', '.join(f'{x:.1f}' for x in loads)}")
    print(format_summary(s))
    if roofs:
        print(f"\nroof (drope-bench peak, {args.threads} threads): "
              + ", ".join(f"{k} {v:.0f} GFLOP/s" for k, v in roofs.items()) + f"; model {fpt / 1e6:.1f} MFLOP/token")
        print("| side | share of its dtype's roof (median tokens/s) |\n|---|---:|")
        for n, (m, _, _) in s.sides.items():
            # The roof of the dtype the side computes in: a drope bf16 side that fell back to float32 is float32's.
            computed = {row[n].extra.get("computes_in") for row in rounds if n in row}
            dtype = "float32" if "float32" in computed else "bfloat16" if "bf16" in n else "float32"
            note = " (computed in float32)" if "bf16" in n and dtype == "float32" else ""
            print(f"| {n} | {100 * m * fpt / (roofs[dtype] * 1e9):.0f} % of {dtype}{note} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({
            "args": vars(args), "flops_per_token": fpt, "roof_gflops": roofs, "load_avg": loads,
            "rounds": [{n: {"step_s": r.step_s, "tokens_per_s": r.tokens_per_s, **r.extra} for n, r in row.items()}
                       for row in rounds],
            "busy_rounds": s.busy_rounds}, indent=1))


if __name__ == "__main__":
    main()
