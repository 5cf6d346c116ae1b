#!/usr/bin/env bash
# Builds the training corpus from pinned Debian packages (scripts/corpus.lock), a SentencePiece tokenizer
# and token shards (drope-data prepare); idempotent.
#
#   bash scripts/make_corpus.sh            # full corpus (reproduction): ~36 MB of text, vocab 4096
#   bash scripts/make_corpus.sh --small    # quickstart corpus: Jane Austen only (~3.5 MB), vocab 2048
#
# Steps, outputs and environment knobs (DROPE_BUILD_DIR, DROPE_CORPUS_DIR, DROPE_DATA_DIR, DROPE_VOCAB,
# DROPE_CORPUS_LOCAL): bash scripts/make_corpus.sh --help (scripts/drope_scripts/corpus.py).
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/run_python.sh" drope_scripts.corpus "$@"
