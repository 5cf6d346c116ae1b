"""Atomic file writes for the scripts (light: imported by drope_scripts.gpu_check without the heavy modules)."""
from __future__ import annotations

import os
import pathlib
import tempfile


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Writes `text` to a temporary file beside `path`, then renames it over `path`."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are ordinary files
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
