#!/usr/bin/env bash
# The main job on its embedded default: set up (idempotent), build, then run the end-to-end DroPE
# pipeline on this machine's own prose (pretrain RoPE → DroPE → recalibrate → perplexity vs length).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup.sh"
cd "$ROOT"
exec "${DROPE_BUILD_DIR:-$ROOT/build}/drope-demo" --out "${DROPE_RUN_DIR:-runs/quickstart}" "$@"
