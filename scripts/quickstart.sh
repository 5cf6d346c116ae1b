#!/usr/bin/env bash
# The main job on its embedded default, with the real CLIs: set up + build (idempotent), build the small
# corpus (Jane Austen, SentencePiece vocab 2048), pretrain a tiny RoPE model at context C = 256 for 400
# steps, DroPE-recalibrate its step-300 checkpoint with QK-norm for the remaining 100 steps (equal budget),
# evaluate RoPE, RoPE+PI, RoPE+NTK, RoPE+YaRN (eval-time, factor 2) and DroPE on perplexity at C and 2C;
# then the offset-key retrieval experiment (one seed: RoPE / PI / NTK / YaRN / DroPE at C-8C, claim
# verdicts), and print the tables. Target: at most 10 minutes on 2 idle cores after the install.
#
# Outputs in runs/quickstart/ (DROPE_RUN_DIR): rope/, drope/, eval/, offset-key/, results.md,
# results-ppl.*, timing.txt. Re-running reuses what is finished; DROPE_FORCE=1 redoes training and evaluation;
# DROPE_SKIP_SETUP=1 skips scripts/setup.sh; DROPE_BUILD_DIR (or --build DIR) picks the binaries (build/),
# --out DIR the run directory. Arguments and knobs are checked before the set-up and any work.
# The steps: studies/quickstart.py (the driver it shares with reproduce.sh: scripts/drope_scripts/driver.py).
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../studies/run.sh" quickstart "$@"
