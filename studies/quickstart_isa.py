"""The quickstart at two instruction-set levels of one machine, drope's kernels and LibTorch's dispatch capped
together (scripts/lib/isa_levels.txt), and one table of how far the results move: the same seeds and data, only
the floating-point order differs.

  bash studies/run.sh quickstart_isa [LEVEL_A LEVEL_B] [--out FILE] [--build DIR]   # default: avx2 baseline

Outputs: runs/quickstart-<level>/ (a whole quickstart each) and runs/quickstart-isa.md (both tables with every
differing cell as "A → B", and the largest differences: the study isa_compare, run as a program). Levels the CPU
lacks are refused up front. DROPE_SKIP_SETUP=1 skips scripts/setup.sh; --build (or DROPE_BUILD_DIR) picks the
binaries (build/); --out the comparison's Markdown.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

from drope_scripts import cli, isa_levels, study
from drope_scripts.driver import ROOT


def check_levels(levels: list[str], bin_dir: pathlib.Path | None = None) -> tuple[str, str]:
    """The two levels to compare; ValueError naming what is wrong with them. With `bin_dir`, also that this CPU
    runs both (drope-bench there)."""
    if len(levels) not in (0, 2):
        raise ValueError(f"expected two levels ({', '.join(isa_levels.levels())}), got {len(levels)}")
    a, b = levels or ("avx2", "baseline")
    if a == b:
        raise ValueError(f"the two levels must differ, got {a} twice")
    for level in (a, b):
        isa_levels.env(level)
    for level in (a, b) if bin_dir is not None else ():
        if isa_levels.runs(bin_dir, level) is not None:
            raise ValueError(f"this CPU cannot run level {level}")
    return a, b


def run_dir(level: str) -> pathlib.Path:
    return ROOT / "runs" / f"quickstart-{level}"


def main(argv: list[str]) -> int:
    ap = cli.Parser("quickstart_isa", prog="studies/run.sh quickstart_isa", description=__doc__.splitlines()[0])
    ap.add_argument("levels", nargs="*", metavar="LEVEL", help="two levels (default: avx2 baseline)")
    ap.add_argument("--out", type=pathlib.Path, metavar="FILE",
                    help="the comparison's Markdown (default runs/quickstart-isa.md)")
    cli.add_build_option(ap, "DROPE_BUILD_DIR")
    a = ap.parse_args(argv)
    try:
        levels = check_levels(a.levels)
    except ValueError as e:
        ap.error(str(e))
    out = ap.check(cli.out_file, cli.caller_path(a.out), "--out") if a.out else ROOT / "runs" / "quickstart-isa.md"
    for level in levels:
        ap.check(cli.out_dir, run_dir(level), f"the run directory of level {level}")
    ap.check(cli.env_switch, "DROPE_FORCE")
    bin_dir = cli.checked_build(ap, a, "DROPE_BUILD_DIR", ("drope-bench", *study.TRAINING_TOOLS))
    try:
        check_levels(a.levels, bin_dir)
    except ValueError as e:
        ap.error(str(e))
    run_sh = str(ROOT / "studies" / "run.sh")
    for level in levels:
        print(f"== quickstart at {level} ({isa_levels.describe(level)})", flush=True)
        env = {**os.environ, **isa_levels.env(level), "DROPE_SKIP_SETUP": "1"}
        r = subprocess.run(["bash", run_sh, "quickstart", "--out", str(run_dir(level)), "--build", str(bin_dir)],
                           env=env)
        if r.returncode != 0:
            return r.returncode
    return subprocess.run(["bash", run_sh, "isa_compare", *(f"{level}={run_dir(level) / 'results.md'}" for level in
                                                           levels), "--out", str(out)]).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
