#!/usr/bin/env bash
# The DroPE pipeline rehearsed at a real model's shape on the CPU: a random-weight HF
# directory written by transformers at the real config (SmolLM-360M, or Llama-2-7B's width with 2 layers) →
# drope-data prepare with its own tokenizer → drope-model drop --qk-norm qk → drope-train recalibration
# (shard params + activation checkpointing, torchrun --no-python, 2 ranks, Gloo) → drope-eval ppl and niah →
# export to the DroPE authors' HF format → transformers loads it, logits within 1e-4 of ours. One summary
# line per stage; summary.json in the output directory; exit status 0 when every stage is ok.
#
#   scripts/rehearse.sh [--shape smollm-360m|llama2-7b-2l|tiny] [--steps N] [--seq-len L] [--nproc 2]
#                       [--batch B] [--out DIR] [--bin DIR] [--force]
#
# Defaults: --shape smollm-360m, --nproc 2, --out runs/rehearse/<shape>, --bin $DROPE_BIN or build/.
# Memory: smollm-360m needs about 8 GB per rank; llama2-7b-2l about 10 GB per rank at 2 ranks with glibc's default
# heap policy (GLIBC_TUNABLES=glibc.malloc.trim_threshold=131072; drope's own needs more), docs/results/rehearsal.md.
# The steps: scripts/drope_scripts/rehearse.py (docs/results/rehearsal.md has measured runs).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec bash "$ROOT/scripts/run_python.sh" drope_scripts.rehearse "$@"
