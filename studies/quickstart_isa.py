"""The quickstart at two instruction-set levels of one machine, drope's kernels and LibTorch's dispatch capped
together (scripts/lib/isa_levels.txt), and one table of how far the results move: the same seeds and data, only
the floating-point order differs.

  bash studies/run.sh quickstart_isa [LEVEL_A LEVEL_B]   # default: avx2 baseline

Outputs: runs/quickstart-<level>/ (a whole quickstart each) and runs/quickstart-isa.md (both tables with every
differing cell as "A → B", and the largest differences: isa_compare.py). Levels the CPU lacks are refused up front.
DROPE_SKIP_SETUP=1 skips scripts/setup.sh; DROPE_BUILD_DIR picks the binaries (build/).
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from drope_scripts import isa_levels
from drope_scripts.driver import ROOT
from studies import isa_compare


def check_levels(levels: list[str], bin_dir: pathlib.Path) -> tuple[str, str]:
    """The two levels to compare; ValueError naming what is wrong with them."""
    if len(levels) not in (0, 2):
        raise ValueError(f"expected two levels ({', '.join(isa_levels.levels())}), got {len(levels)}")
    a, b = levels or ("avx2", "baseline")
    if a == b:
        raise ValueError(f"the two levels must differ, got {a} twice")
    for level in (a, b):
        isa_levels.env(level)
    for level in (a, b):
        if isa_levels.runs(bin_dir, level) is not None:
            raise ValueError(f"this CPU cannot run level {level}")
    return a, b


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    bin_dir = pathlib.Path(os.environ.get("DROPE_BUILD_DIR", ROOT / "build"))
    try:
        levels = check_levels(argv, bin_dir)
    except ValueError as e:
        print(f"quickstart_isa: {e}", file=sys.stderr)
        return 2
    for level in levels:
        print(f"== quickstart at {level} ({isa_levels.describe(level)})", flush=True)
        env = {**os.environ, **isa_levels.env(level), "DROPE_RUN_DIR": str(ROOT / "runs" / f"quickstart-{level}"),
               "DROPE_SKIP_SETUP": "1"}
        r = subprocess.run(["bash", str(ROOT / "studies" / "run.sh"), "quickstart"], env=env)
        if r.returncode != 0:
            return r.returncode
    return isa_compare.main([f"{level}={ROOT / 'runs' / f'quickstart-{level}' / 'results.md'}" for level in levels]
                            + ["--out", str(ROOT / "runs" / "quickstart-isa.md")])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
