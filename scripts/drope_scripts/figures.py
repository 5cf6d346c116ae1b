"""Figures of the studies: matplotlib on the Agg backend where it is installed, and PNGs written atomically."""
from __future__ import annotations

import os
import pathlib


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None when matplotlib is not installed (the caller skips its plot)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_png(fig, path: pathlib.Path, dpi: int = 110) -> None:
    """Writes `fig` to a temporary PNG beside `path`, renames it over `path` and closes the figure."""
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=dpi)
    import matplotlib.pyplot as plt

    plt.close(fig)
    os.replace(tmp, path)
