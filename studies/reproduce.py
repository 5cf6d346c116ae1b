"""The paper's claims at small scale, in one Markdown report with plots (runs/reproduce/REPORT.md):
  1. Fig. 3   positional-bias gradient norms at initialisation, RoPE vs NoPE per layer (drope-analyze)
  2. Table 7  RoPE vs NoPE vs DroPE (RoPE, positional embeddings dropped + QK-norm at 7/8 of training)
              validation perplexity at equal budget, over several seeds (mean, std, t interval, min–max), and
              the paired tests of "DroPE matches RoPE" (TOST within 5 %) and "DroPE beats NoPE"
  3. Table 1  NIAH multi-query / multi-key / multi-value at 2× the training context for RoPE, RoPE+PI,
              RoPE+NTK, RoPE+YaRN (eval-time, factor 2), NoPE, ALiBi, RNoPE-SWA, DroPE
  4.          perplexity vs length up to 8× for the same models; the fitted temperature c (DroPE, NoPE)
  5.          offset-key retrieval (offset_key.py): RoPE, RoPE+PI/NTK/YaRN (factor L/C), RoPE crop, NoPE and
              DroPE (fitted temperature, and c = 0) at C–8C over DROPE_REPRO_OK_SEEDS seeds (NoPE: the first seed;
              mean and an interval inside [0, 100]), far accuracy vs length, and the verdicts on claims (a)–(f),
              each with its test and p-value (docs/design.md#statistics-protocol)
Every model of 1–4: configs/train/repro-tiny.yaml (tiny, C = 256, vocab 4096) on the full Debian corpus; of 5:
configs/train/offset-key-{rope,drope}.yaml (C = 128, generated sequences).

Idempotent: finished training runs and evaluations are reused (DROPE_FORCE=1 redoes all). Knobs (env):
DROPE_REPRO_SCALE (full | reduced), DROPE_REPRO_STEPS, DROPE_REPRO_SEEDS, DROPE_REPRO_TRIALS,
DROPE_REPRO_OK_SEEDS (offset-key seeds: 5 full, 1 reduced), DROPE_REPRO_JOBS (independent runs side by side:
default half the CPUs, each tool with cpus / jobs threads), DROPE_RUN_DIR (runs/reproduce), DROPE_BUILD_DIR
(build/); the flags --out DIR and --build DIR say the last two on the command line. Every knob is checked
(ASCII digits, drope_scripts.cli) before any work starts: a bad one is one line naming it, exit 2.
"""
from __future__ import annotations

import functools
import os
import pathlib
import re
import sys
from dataclasses import dataclass

from drope_scripts import cli, corpus, offset_key, report
from drope_scripts.driver import (
    NONE,
    ROOT,
    Driver,
    Method,
    checkpoint,
    concat_tables,
    jobs_knob,
    remove_outputs,
    run_pipeline,
    seed_from_checkpoint,
    train_state,
)

C = 256
DATA = "runs/data/full"
HAYSTACK = "runs/corpus/full/heldout"
CONFIG = "configs/train/repro-tiny.yaml"
OUTPUTS = ("settings.txt", "timing", "fig3", "train", "eval", "ppl_vs_length.*", "results.md", "results-ppl.*",
           "results-niah.*", "offset-key", "REPORT.md")
OFFSET_KEY_QUERIES = 1000
OFFSET_KEY_NOPE_SEEDS = 1  # NoPE from scratch, a reference no claim reads, runs on the first offset-key seed


@dataclass(frozen=True)
class Settings:
    """The scale of a reproduction: training steps, seeds of RoPE/NoPE/DroPE, NIAH trials, perplexity windows,
    seeds of the offset-key experiment (its training length comes from its configs)."""

    scale: str
    steps: int
    seeds: int
    trials: int
    windows: int
    bias_grad: tuple[str, ...]
    ok_seeds: int

    @property
    def drop_at(self) -> int:
        """DroPE drops the positional embeddings at 7/8 of training."""
        return self.steps * 7 // 8

    def line(self) -> str:
        """settings.txt."""
        return (f"scale={self.scale} steps={self.steps} seeds={self.seeds} trials={self.trials} "
                f"drop_at={self.drop_at} C={C} ok_seeds={self.ok_seeds}")


def settings(env: dict[str, str]) -> Settings:
    """DROPE_REPRO_SCALE and its overrides DROPE_REPRO_STEPS / _SEEDS / _TRIALS / _OK_SEEDS (positive ASCII
    integers: cli.env_int's UsageError, a ValueError, names the variable)."""
    scale = env.get("DROPE_REPRO_SCALE", "full")
    defaults = {"full": (600, 3, 40, 48, ("--seeds", "3", "--seqs", "8"), 5),
                "reduced": (120, 2, 10, 16, ("--seeds", "2", "--seqs", "4"), 1)}
    if scale not in defaults:
        raise ValueError(f"DROPE_REPRO_SCALE must be full or reduced, got '{scale}'")
    steps, seeds, trials, windows, bg, ok_seeds = defaults[scale]

    def knob(name: str, default: int) -> int:
        return cli.env_int(name, default, 1, None, env)

    return Settings(scale, knob("DROPE_REPRO_STEPS", steps), knob("DROPE_REPRO_SEEDS", seeds),
                    knob("DROPE_REPRO_TRIALS", trials), windows, bg, knob("DROPE_REPRO_OK_SEEDS", ok_seeds))


class StageTimes:
    """Stage durations in run/timing/<stage>, kept from the invocation that did the stage's work: a re-run that
    reuses finished stages keeps the earlier times."""

    def __init__(self, run: pathlib.Path, d: Driver):
        self.dir, self.d = run / "timing", d
        self.dir.mkdir(parents=True, exist_ok=True)
        self.start, self.work = d.elapsed(), False

    def mark(self, stage: str) -> None:
        f = self.dir / stage
        if self.work or not f.is_file():
            f.write_text(f"{self.d.elapsed() - self.start}\n")
        self.start, self.work = self.d.elapsed(), False


TOOLS = ("drope-train", "drope-eval", "drope-analyze", "drope-data")


def parse(argv: list[str]) -> tuple[pathlib.Path, pathlib.Path]:
    """The run directory and the build directory, every knob checked before any work (drope_scripts.cli); a
    pending scripts/setup.sh runs after the checks."""
    ap = cli.Parser("reproduce", prog="scripts/reproduce.sh", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, metavar="DIR",
                    help="run directory (default $DROPE_RUN_DIR, else runs/reproduce)")
    cli.add_build_option(ap, "DROPE_BUILD_DIR")
    a = ap.parse_args(argv)
    ap.check(settings, os.environ)
    ap.check(jobs_knob, os.environ, "DROPE_REPRO_JOBS")
    ap.check(cli.env_switch, "DROPE_FORCE")
    ap.check(corpus.knobs, "full")
    return cli.checked_run_dir(ap, a.out, "runs/reproduce"), cli.checked_build(ap, a, "DROPE_BUILD_DIR", TOOLS)


def reproduce(run: pathlib.Path | None = None, bin_dir: pathlib.Path | None = None) -> int:
    """The reproduction into `run` (default $DROPE_RUN_DIR, else runs/reproduce) with the binaries of `bin_dir`
    (default $DROPE_BUILD_DIR, else build/). A bad knob: one line, 2."""
    os.chdir(ROOT)
    env = os.environ
    try:
        s = settings(env)
        jobs = jobs_knob(env, "DROPE_REPRO_JOBS")
        force = cli.env_switch("DROPE_FORCE", env)
    except ValueError as e:
        print(f"reproduce: {e}", file=sys.stderr)
        return 2
    d = Driver("reproduce", bin_dir or pathlib.Path(env.get("DROPE_BUILD_DIR", ROOT / "build")), width=4, jobs=jobs)
    run = run or pathlib.Path(env.get("DROPE_RUN_DIR", "runs/reproduce"))
    if force:
        remove_outputs(run, OUTPUTS)
    (run / "eval").mkdir(parents=True, exist_ok=True)
    (run / "train").mkdir(parents=True, exist_ok=True)
    (run / "settings.txt").write_text(s.line() + "\n")
    times = StageTimes(run, d)

    d.stage("corpus: all five Debian packages, SentencePiece vocab 4096")
    rc = corpus.main([])
    if rc:
        return rc
    times.mark("corpus")

    d.stage("1/5 Fig. 3: positional-bias gradients at initialisation (drope-analyze bias-grad)")
    if not (run / "fig3" / "bias_grad.json").is_file():
        d.tool("drope-analyze", "bias-grad", "--preset", "tiny", *s.bias_grad, "--out", run / "fig3", show=12)
        times.work = True
    else:
        print(f"reusing {run}/fig3")
    times.mark("fig3")

    def train(name: str, seed: int, *overrides: str) -> None:
        run_dir = run / "train" / f"{name}-s{seed}"
        if train_state(run_dir, s.steps) == "finished":
            d.say(f"{name} seed {seed}: done ({checkpoint(run_dir, s.steps)})")
            return
        d.say(f"== {name} seed {seed}")
        times.work = True
        d.train(CONFIG, run_dir, s.steps, [f"run.name={name}-s{seed}", f"run.seed={seed}", f"train.steps={s.steps}",
                                           *overrides], show=re.compile(r"^(step|done)"))

    def rope_then_drope(seed: int) -> None:
        """RoPE, keeping its step-drop_at checkpoint; then DroPE, which repeats RoPE's first drop_at steps (same
        seed, data order and schedule), resumed from a copy of that checkpoint: the same weights as from scratch
        and the same log after step drop_at (tests/py/test_drop_from_checkpoint.py). Without the checkpoint (a
        RoPE run of an earlier reproduction), DroPE trains from step 0. keep_last 3: a RoPE run stopped and
        resumed after drop_at saves one checkpoint more, and drop_at's must survive it."""
        train("rope", seed, "model.positional.type=rope", f"train.checkpoint_every={s.drop_at}", "train.keep_last=3")
        src, dst = checkpoint(run / "train" / f"rope-s{seed}", s.drop_at), run / "train" / f"drope-s{seed}"
        if seed_from_checkpoint(src, dst):
            d.say(f"drope seed {seed}: continues a copy of {src}")
        elif train_state(dst, s.steps) == "fresh":
            d.say(f"drope seed {seed}: trains from step 0 ({src} is missing)")
        train("drope", seed, "model.positional.type=rope", f"drope.drop_at_step={s.drop_at}")

    def model(name: str) -> pathlib.Path:
        return checkpoint(run / "train" / name, s.steps)

    d.stage(f"2/5 training at equal budget: {s.steps} steps × 8 × {C} tokens; RoPE, NoPE, DroPE (drop at step "
            f"{s.drop_at}, continuing RoPE's step-{s.drop_at} checkpoint) × {s.seeds} seeds; ALiBi, RNoPE-SWA × 1")
    tasks = []
    for seed in range(s.seeds):
        tasks += [(f"rope+drope s{seed}", functools.partial(rope_then_drope, seed)),
                  (f"nope s{seed}", functools.partial(train, "nope", seed, "model.positional.type=nope"))]
    tasks += [(f"{name} s0", functools.partial(train, name, 0, f"model.positional.type={name}"))
              for name in ("alibi", "rnope-swa")]
    d.parallel(tasks)
    times.mark("train")

    ms = [
        Method("RoPE", model("rope-s0")),
        Method("RoPE+PI", model("rope-s0"), ("--rope-scaling", "pi", "--factor", "2")),
        Method("RoPE+NTK", model("rope-s0"), ("--rope-scaling", "ntk", "--factor", "2")),
        Method("RoPE+YaRN", model("rope-s0"), ("--rope-scaling", "yarn", "--factor", "2")),
        Method("NoPE", model("nope-s0")),
        Method("ALiBi", model("alibi-s0")),
        Method("RNoPE-SWA", model("rnope-swa-s0")),
        Method("DroPE", model("drope-s0")),
    ]

    d.stage(f"3/5 NIAH at 2C = {2 * C} (multiquery, multikey_1, multivalue; {s.trials} trials each; greedy)")

    def niah_eval(m: Method) -> pathlib.Path:
        out = run / "eval" / f"niah-{m.slug}"
        doc, computed = d.evaluate("niah", m, out, ("--tokenizer", DATA, "--lengths", 2 * C, "--tasks", "paper",
                                                    "--trials", s.trials, "--max-new-tokens", 32, "--haystack",
                                                    HAYSTACK, "--seed", 0, "--batch-size", 8), "niah")
        times.work |= computed
        d.say(f"{m.name}: {doc['summary']['avg']:.2f} (mean score)")
        return out.with_name(out.name + ".json")

    niah = d.parallel([(m.slug, functools.partial(niah_eval, m)) for m in ms])
    times.mark("niah")

    d.stage("4/5 fitted temperature c (DroPE, NoPE) and perplexity vs length 1×–8× "
            "(drope-eval fit-temperature, ppl)")

    def fit(name: str) -> None:
        if not (model(name) / "temperature.json").is_file():
            d.tool("drope-eval", "fit-temperature", "--model", model(name), "--tokenizer", DATA, "--data", DATA,
                   "--multipliers", 2, 4, 8, "--max-windows", s.windows, "--out", run / "eval" / f"temperature-{name}",
                   show=3)
            times.work = True

    d.parallel([(name, functools.partial(fit, name)) for name in ("drope-s0", "nope-s0")])
    ms += [Method("DroPE+temp", model("drope-s0"), ("--temperature", "auto")),
           Method("NoPE+temp", model("nope-s0"), ("--temperature", "auto"))]
    ppl_args = ("--tokenizer", DATA, "--data", DATA, "--multipliers", 1, 2, 4, 8, "--max-windows", s.windows)

    def ppl_eval(m: Method) -> pathlib.Path:
        out = run / "eval" / f"ppl-{m.slug}"
        _, computed = d.evaluate("ppl", m, out, ppl_args, "ppl", show=re.compile("ppl="))
        times.work |= computed
        return out.with_name(out.name + ".json")

    ppl = d.parallel([(m.slug, functools.partial(ppl_eval, m)) for m in ms])
    # All curves on one plot (the last method drawn with the others beside it).
    last = ms[-1]
    d.tool("drope-eval", "ppl", "--model", last.model, *last.options, "--label", last.name, *ppl_args,
           "--with", *ppl[:-1], "--out", run / "ppl_vs_length", show=NONE)
    d.compare(ppl, run / "results-ppl", f"Perplexity vs length (held-out split), tiny models trained at C = {C} for "
              f"{s.steps} steps")
    d.compare(niah, run / "results-niah", f"NIAH at 2C = {2 * C} (string_match_all ×100)")
    concat_tables([run / "results-ppl.md", run / "results-niah.md"], run / "results.md")
    times.mark("eval")

    plan = offset_key.Plan(seeds=tuple(range(s.ok_seeds)), queries=OFFSET_KEY_QUERIES, nope=True,
                           nope_seeds=min(s.ok_seeds, OFFSET_KEY_NOPE_SEEDS),
                           train_show=re.compile(r"^(step|done)"))
    d.stage(f"5/5 offset-key retrieval: {offset_key.describe(plan)}")

    def ok_mark(stage: str, computed: bool) -> None:
        times.work |= computed
        times.mark(stage)

    offset_key.run(d, run / "offset-key", plan, ok_mark)

    d.stage("report")
    text = report.build(run, report.ReportSettings(s.scale, s.steps, s.drop_at, C, s.trials))
    (run / "REPORT.md").write_text(text, encoding="utf-8")
    print(text, end="")
    d.stage(f"done: {run}/REPORT.md (plots: {run}/fig3/bias_grad.png, {run}/ppl_vs_length.png, "
            f"{run}/offset-key/far.png)")
    return 0


def main(argv: list[str]) -> int:
    run, bin_dir = parse(argv)
    return run_pipeline("reproduce", lambda: reproduce(run, bin_dir))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
