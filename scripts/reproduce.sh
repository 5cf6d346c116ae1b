#!/usr/bin/env bash
# The paper's claims at small scale, in one Markdown report with plots (runs/reproduce/REPORT.md): Fig. 3
# (positional-bias gradients at initialisation), Table 7 (RoPE vs NoPE vs DroPE perplexity at equal budget
# over seeds), Table 1 (NIAH at 2× the training context, with eval-time RoPE scaling, ALiBi, RNoPE-SWA),
# perplexity vs length up to 8× and the fitted temperature c, and offset-key retrieval (RoPE,
# RoPE+PI/NTK/YaRN, NoPE, DroPE at C-8C over 5 seeds, mean ± 95 % CI, plot, one verdict line per claim).
#
#   bash scripts/reproduce.sh                             # DROPE_REPRO_SCALE=full: target ≤ 45 min on 2 idle cores
#   DROPE_REPRO_SCALE=reduced bash scripts/reproduce.sh   # ~1/3 of the training, fewer trials: a smoke run
#
# Idempotent: finished training runs and evaluations are reused (DROPE_FORCE=1 redoes all). Knobs (env):
# DROPE_REPRO_STEPS, DROPE_REPRO_SEEDS, DROPE_REPRO_TRIALS, DROPE_REPRO_OK_SEEDS (offset-key seeds), DROPE_REPRO_JOBS,
# DROPE_RUN_DIR (runs/reproduce; or --out DIR), DROPE_SKIP_SETUP, DROPE_BUILD_DIR (or --build DIR), each checked
# before the set-up and any work. The steps:
# studies/reproduce.py (offset_key.py and report.py in scripts/drope_scripts/).
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../studies/run.sh" reproduce "$@"
