"""The six offset-key claims on fresh seeds (docs/claims-study.md, protocol committed before the runs): RoPE and
DroPE trained as in the reproduction (offset_key.py) on seeds 2000-2009, every method of the statistics protocol
evaluated on the test split with per-seed values kept (RoPE, PI / NTK / YaRN with factor L/C without and with
their own fitted temperature, the cropped baseline, DroPE with its fitted temperature and with c = 0), and claims
(a)-(f) decided by offset_key_report with paired tests.

Writes <out>/results.{md,json,csv}, far.{png,svg} (offset_key.py's layout) and <out>/fits.md (the fitted c of
every method, seed and length; descriptive). Resumable: finished runs, fits and evaluations are reused.
--publish copies the table and the fits to docs/results/offset-key-claims.{md,csv}; committing them is yours.

Usage: bash studies/run.sh offset_key_claims [--out runs/offset-key-claims] [--build DIR] [--seeds 10]
       [--jobs 1] [--publish]
"""
from __future__ import annotations

import os
import pathlib
import statistics
import sys

from drope_scripts import cli, offset_key, results
from drope_scripts.atomic import write_atomic
from drope_scripts.driver import ROOT, Driver, checkpoint, config_steps, run_pipeline

FIRST_SEED = 2000  # no earlier run used seeds from here on (docs/claims-study.md)
TOOLS = ("drope-train", "drope-eval")
DOCS = ROOT / "docs" / "results"


def parse(argv: list[str]):
    ap = cli.Parser("offset_key_claims", prog="bash studies/run.sh offset_key_claims",
                    description=__doc__.splitlines()[0])
    ap.add_argument("--out", metavar="DIR", help="study directory (default runs/offset-key-claims)")
    ap.add_argument("--seeds", type=cli.int_type(2, 100), default=10, metavar="N",
                    help=f"seeds {FIRST_SEED}..{FIRST_SEED}+N-1 (default 10, the protocol's)")
    ap.add_argument("--jobs", type=cli.int_type(1, 16), default=1, metavar="N", help="runs side by side (default 1)")
    ap.add_argument("--publish", action="store_true",
                    help="copy the table and the fits to docs/results/offset-key-claims.{md,csv}")
    cli.add_build_option(ap, "DROPE_BUILD_DIR")
    a = ap.parse_args(argv)
    out = cli.checked_run_dir(ap, a.out, "runs/offset-key-claims")
    return a, out, cli.checked_build(ap, a, "DROPE_BUILD_DIR", TOOLS)


def fits_table(out: pathlib.Path, plan: offset_key.Plan) -> str:
    """The fitted c of every method and length (mean, min–max over seeds), DroPE's one c for all lengths."""
    lines = ["| method | length | fitted c: mean | min | max | seeds |", "|---|---|---:|---:|---:|---:|"]

    def row(label: str, where: str, files: list[pathlib.Path]) -> None:
        cs = [float(results.load(f, "temperature")["c"]) for f in files if f.is_file()]
        if cs:
            lines.append(f"| {label} | {where} | {statistics.fmean(cs):.3f} | {min(cs):.3f} | {max(cs):.3f} | "
                         f"{len(cs)} |")

    c = offset_key.context(offset_key.ROPE_CONFIG)
    for spec in plan.specs():
        if spec.temperature == offset_key.FIT:
            for mult in (m for m in plan.multipliers if m > 1):  # factor 1 is plain RoPE
                row(spec.label, f"{mult}C", [out / "fits" / f"{spec.slug}-s{s}-L{mult * c}.json" for s in plan.seeds])
    steps = config_steps(offset_key.DROPE_CONFIG)
    row(offset_key.DROPE_T, "all (one c)", [checkpoint(out / "train" / f"drope-s{s}", steps) /
                                                      "temperature.json" for s in plan.seeds])
    return "\n".join(lines) + "\n"


def study(a, out: pathlib.Path, bin_dir: pathlib.Path) -> int:
    os.chdir(ROOT)  # the configs are relative to the repository root; `out` is absolute (cli.checked_run_dir)
    plan = offset_key.Plan(seeds=tuple(range(FIRST_SEED, FIRST_SEED + a.seeds)), queries=1000,
                           scaled_temperature=True)
    d = Driver("offset-key-claims", bin_dir, width=5, jobs=a.jobs)
    d.stage(f"offset-key claims: {offset_key.describe(plan)}")
    outcome = offset_key.run(d, out, plan)
    fits = fits_table(out, plan)
    write_atomic(out / "fits.md", fits)
    print(outcome.text, end="")
    print("\nFitted temperatures (held-out sequences; descriptive):\n\n" + fits, end="")
    if a.publish:
        text = outcome.text.replace(str(out), "runs/offset-key-claims").replace(str(ROOT) + "/", "")
        write_atomic(DOCS / "offset-key-claims.md",
                     text + "\n### Fitted temperatures (held-out sequences; descriptive)\n\n" + fits)
        write_atomic(DOCS / "offset-key-claims.csv", (out / "results.csv").read_text())
        print(f"copied to docs/results (commit them): {DOCS / 'offset-key-claims.md'}, "
              f"{DOCS / 'offset-key-claims.csv'}")
    return 0


def main(argv: list[str]) -> int:
    a, out, bin_dir = parse(argv)
    return run_pipeline("offset_key_claims", lambda: study(a, out, bin_dir))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
