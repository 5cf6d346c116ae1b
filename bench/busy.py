#!/usr/bin/env python3
"""Training throughput on a shared CPU (benchmark, not a test): drope-train on the quickstart model shape
(preset tiny, vocab 2048, seq 256 x batch 8, bytes of /usr/share/common-licenses) idle and beside 1 and 2
busy processes (pure spin loops, one core each), under each OpenMP setting:

  libgomp default   DROPE_OMP_DEFAULTS=0: libgomp's own spin-wait (300k spins), threads = affinity mask
  drope default     what drope's tools set before OpenMP starts (OMP_WAIT_POLICY=PASSIVE, threads from the
                    CPU budget: affinity mask and cgroup quota)
  spin 10000        GOMP_SPINCOUNT=10000
  1 thread          OMP_NUM_THREADS=1

  .venv/bin/python bench/busy.py [--steps 40] [--busy 0,1,2]
"""
import argparse
import multiprocessing as mp
import os
import pathlib
import subprocess
import tempfile
import time

from benchlib import ROOT, tokens_per_s, train_log

SETTINGS = {
    "libgomp default": {"DROPE_OMP_DEFAULTS": "0"},
    "drope default": {},
    "spin 10000": {"GOMP_SPINCOUNT": "10000"},
    "1 thread": {"OMP_NUM_THREADS": "1"},
}


def spin():
    while True:
        pass


def run_once(binp, tmp, steps, env_extra):
    out = tmp / f"run-{time.monotonic_ns()}"
    cfg = tmp / "run.yaml"
    cfg.write_text(f"""run:
  name: busy
  out_dir: {out}
  seed: 0
  phase: pretrain
model:
  preset: tiny
  vocab_size: 2048
  max_position: 256
data:
  text: /usr/share/common-licenses
  seq_len: 256
  batch_size: 8
optim:
  lr: 3.0e-3
schedule:
  type: constant
  warmup: 0
train:
  steps: {steps}
  log_every: 1
  checkpoint_every: 0
""")
    env = {"PATH": "/usr/bin:/bin", **env_extra}
    t0 = time.perf_counter()
    r = subprocess.run([binp / "drope-train", cfg, "--quiet"], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"drope-train failed:\n{r.stderr}")
    return tokens_per_s(train_log(out), 2, steps), wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--busy", default="0,1,2", help="numbers of competing busy processes")
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated subset of the settings")
    ap.add_argument("--bin", default=str(ROOT / "build"))
    args = ap.parse_args()
    binp = pathlib.Path(args.bin)
    busy = [int(b) for b in args.busy.split(",")]
    names = args.settings.split(",")
    rows = {n: {} for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        for k in busy:
            hogs = [mp.Process(target=spin, daemon=True) for _ in range(k)]
            for h in hogs:
                h.start()
            try:
                for n in names:
                    rows[n][k] = run_once(binp, tmp, args.steps, SETTINGS[n])
            finally:
                for h in hogs:
                    h.terminate()
    print(f"drope-train, preset tiny (vocab 2048), seq 256 x batch 8, {args.steps} steps (tokens/s after step 2; "
          f"wall s of the whole process), {os.cpu_count()} CPUs")
    print("| setting | " + " | ".join(f"{k} busy: tok/s (wall s)" for k in busy) + " |")
    print("|---|" + "---:|" * len(busy))
    for n in names:
        print(f"| {n} | " + " | ".join(f"{rows[n][k][0]:.0f} ({rows[n][k][1]:.1f})" for k in busy) + " |")


if __name__ == "__main__":
    main()
