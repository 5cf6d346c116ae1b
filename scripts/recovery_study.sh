#!/usr/bin/env bash
# DroPE recovery study on offset-key (docs/recovery-study.md): a grid of recalibration recipes (learning rate,
# warm-up, QK-norm, drop step at an equal budget of 800 steps) × 10 seeds, the recovery rate per recipe (Wilson
# 95 % interval) and far-needle accuracy at 2C-8C (95 % intervals inside 0-100); the recipe is chosen on the
# held-out split, then measured on fresh seeds on the test split. Writes study.{md,json,csv} in the study directory.
#
#   bash scripts/recovery_study.sh --quick                 # smoke run: 2 + 2 seeds, 2 recipes, 80 steps
#   nice -n 19 bash scripts/recovery_study.sh --jobs 2     # the full study, two tasks at a time, one thread each
#   bash scripts/recovery_study.sh --help                  # every option (grid, seeds, budget, queries, ...)
#
# Resumable (finished runs and evaluations are reused) and safe to run in several processes on one --out.
# Needs a build (scripts/setup.sh; DROPE_BIN or --build DIR to use another build directory). The steps:
# studies/recovery_study.py.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../studies/run.sh" recovery_study "$@"
