"""The main job on its embedded default, with the real CLIs (scripts/quickstart.sh runs it after set-up).

Builds the small corpus (Jane Austen from a pinned Debian package, SentencePiece vocab 2048), pretrains a
tiny RoPE model at context C = 256 for 400 steps (drope-train), DroPE-recalibrates its step-300 checkpoint
with QK-norm for the remaining 100 steps (drope-train, phase drope: the same budget as RoPE), then
evaluates RoPE, RoPE+PI, RoPE+NTK, RoPE+YaRN (eval-time, factor 2) and DroPE on perplexity at C and 2C
(drope-eval ppl); then the offset-key retrieval experiment (offset_key.py) with one
seed: RoPE at C = 128 for 800 steps, DroPE from its step 400 for 400 steps, the fitted temperature, accuracy
at C–8C for RoPE, RoPE+PI / NTK / YaRN (factor L/C), RoPE crop, DroPE with and without the temperature, and the claim
verdicts; prints the side-by-side tables (drope-eval compare) and the offset-key table.

Outputs in runs/quickstart/ (DROPE_RUN_DIR): rope/ and drope/ (run dirs: log.jsonl, checkpoints that
are model directories), eval/ (per-method ppl .json/.csv/.md, ppl.png/svg: ppl vs length),
offset-key/ (its runs, evaluations, results.{md,json,csv}, far.png/svg: far-needle accuracy vs length),
results.md (the tables, printed at the end), results-ppl.{md,json,csv}, timing.txt. NIAH is not part of the
quickstart: these tiny prose models retrieve no needles for any method (all zeros; docs/results.md), so
the offset-key task shows long-context retrieval instead; `drope-eval niah` and the reproduction run NIAH.
Re-running reuses the corpus, finished training runs and finished evaluations; DROPE_FORCE=1 redoes
training and evaluation. Binaries from DROPE_BUILD_DIR (build/).

Usage: bash scripts/quickstart.sh [--out DIR] [--build DIR]   (--out: the run directory, default
$DROPE_RUN_DIR, else runs/quickstart; --build: the binaries, default $DROPE_BUILD_DIR, else build/)
"""
from __future__ import annotations

import os
import pathlib
import re
import sys

from drope_scripts import cli, corpus, offset_key, study
from drope_scripts.driver import (
    NONE,
    ROOT,
    Driver,
    Method,
    checkpoint,
    concat_tables,
    config_steps,
    remove_outputs,
    run_pipeline,
)

C = 256
PRETRAIN = "configs/train/quickstart-pretrain-rope.yaml"
DROPE = "configs/train/quickstart-drope.yaml"
DATA = "runs/data/small"
OUTPUTS = ("rope", "drope", "eval", "offset-key", "results.md", "results-ppl.*", "results-niah.*", "timing.txt")
# (results-niah.* is an earlier version's output, still removed by DROPE_FORCE.)
# Offset-key retrieval: one seed, the RoPE-scaling methods and DroPE with and without the fitted temperature.
OFFSET_KEY = offset_key.Plan(seeds=(0,), queries=1000)
TOOLS = study.TRAINING_TOOLS


def methods(rope_model: pathlib.Path, drope_model: pathlib.Path) -> list[Method]:
    """RoPE with and without eval-time scaling (factor 2), and DroPE."""
    return [
        Method("RoPE", rope_model),
        Method("RoPE+PI", rope_model, ("--rope-scaling", "pi", "--factor", "2")),
        Method("RoPE+NTK", rope_model, ("--rope-scaling", "ntk", "--factor", "2")),
        Method("RoPE+YaRN", rope_model, ("--rope-scaling", "yarn", "--factor", "2")),
        Method("DroPE", drope_model),
    ]


def parse(argv: list[str]) -> tuple[pathlib.Path, pathlib.Path]:
    """The run directory and the build directory, every input checked before any work (drope_scripts.cli);
    a pending scripts/setup.sh runs after the checks."""
    ap = cli.Parser("quickstart", prog="scripts/quickstart.sh", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, metavar="DIR",
                    help="run directory (default $DROPE_RUN_DIR, else runs/quickstart)")
    cli.add_build_option(ap, "DROPE_BUILD_DIR")
    a = ap.parse_args(argv)
    ap.check(cli.env_switch, "DROPE_FORCE")
    ap.check(corpus.knobs, "small")
    return cli.checked_run_dir(ap, a.out, "runs/quickstart"), cli.checked_build(ap, a, "DROPE_BUILD_DIR", TOOLS)


def quickstart(run: pathlib.Path | None = None, bin_dir: pathlib.Path | None = None) -> int:
    """The pipeline into `run` (default $DROPE_RUN_DIR, else runs/quickstart) with the binaries of `bin_dir`
    (default $DROPE_BUILD_DIR, else build/)."""
    os.chdir(ROOT)
    env = os.environ
    d = Driver("quickstart", bin_dir or pathlib.Path(env.get("DROPE_BUILD_DIR", ROOT / "build")), width=3)
    run = run or pathlib.Path(env.get("DROPE_RUN_DIR", "runs/quickstart"))
    if cli.env_switch("DROPE_FORCE"):
        remove_outputs(run, OUTPUTS)
    (run / "eval").mkdir(parents=True, exist_ok=True)
    timing = run / "timing.txt"
    timing.write_text("")

    def mark(what: str) -> None:
        with timing.open("a") as f:
            f.write(f"{what} {d.elapsed()}s\n")

    d.stage("1/5 corpus: Jane Austen (r-cran-janeaustenr), SentencePiece BPE vocab 2048, token shards")
    rc = corpus.main(["--small"])
    if rc:
        return rc
    mark("corpus")

    pre_steps, drope_steps = config_steps(PRETRAIN), config_steps(DROPE)
    init_step = pre_steps - drope_steps  # equal budget: DroPE starts DROPE_STEPS before the RoPE run's end
    rope_model = checkpoint(run / "rope", pre_steps)
    drope_init = checkpoint(run / "rope", init_step)
    drope_model = checkpoint(run / "drope", drope_steps)

    d.stage(f"2/5 pretrain a tiny RoPE model at C = {C} ({PRETRAIN})")
    if d.train(PRETRAIN, run / "rope", pre_steps) == "finished":
        print(f"already trained: {rope_model}")
    mark("pretrain")

    d.stage(f"3/5 DroPE: from the RoPE run's step {init_step}, drop RoPE in every layer, add QK-norm, recalibrate "
            f"{drope_steps} steps at C = {C} (equal budget; {DROPE})")
    if not (drope_init / "model.safetensors").is_file():
        print(f"quickstart: {drope_init} is missing (the pretraining config must keep it: checkpoint_every, "
              "keep_last)", file=sys.stderr)
        return 1
    if d.train(DROPE, run / "drope", drope_steps, fresh_overrides=[f"run.init={drope_init}"]) == "finished":
        print(f"already trained: {drope_model}")
    mark("drope")

    ms = methods(rope_model, drope_model)
    d.stage(f"4/5 perplexity on the held-out split at C = {C} and 2C = {2 * C} (drope-eval ppl, sliding windows)")
    ppl_args = ("--tokenizer", DATA, "--data", DATA, "--lengths", C, 2 * C, "--max-tokens", 16384)
    ppl_json = []
    for m in ms:
        out = run / "eval" / f"ppl-{m.slug}"
        _, computed = d.evaluate("ppl", m, out, ppl_args, "ppl", show=re.compile("ppl="))
        if not computed:
            print(f"{m.name}: reusing {out}.json")
        ppl_json.append(out.with_name(out.name + ".json"))
    # One plot with every method: re-draw the last method's curve with the others beside it.
    last = ms[-1]
    d.tool("drope-eval", "ppl", "--model", last.model, *last.options, "--label", last.name, *ppl_args,
           "--with", *ppl_json[:-1], "--out", run / "eval" / "ppl", show=NONE)
    print(f"plot: {run}/eval/ppl.png")
    mark("ppl")

    d.stage(f"5/5 offset-key retrieval: {offset_key.describe(OFFSET_KEY)}")
    offset_key.run(d, run / "offset-key", OFFSET_KEY, lambda stage, _: mark(stage))

    d.compare(ppl_json, run / "results-ppl",
              f"Perplexity (held-out split), tiny models trained at C = {C} for {pre_steps} steps (DroPE: "
              f"{init_step} RoPE + {drope_steps} recalibration); eval-time scaling factor 2")
    table = concat_tables([run / "results-ppl.md", run / "offset-key" / "results.md"], run / "results.md")
    mark("total")
    d.stage(f"done in {d.elapsed()} s — {run}/results.md (results-ppl.{{json,csv}}, "
            f"offset-key/results.{{json,csv}}), plots {run}/eval/ppl.png, {run}/offset-key/far.png")
    print(table, end="")
    return 0


def main(argv: list[str]) -> int:
    run, bin_dir = parse(argv)
    return run_pipeline("quickstart", lambda: quickstart(run, bin_dir))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
