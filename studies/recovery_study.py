"""DroPE recovery study on offset-key (docs/recovery-study.md): how reliably does DroPE's recalibration recover
RoPE's in-context accuracy at an equal budget, and with which recipe?

Per seed, one RoPE run of T steps (configs/train/offset-key-rope.yaml, T = 800 by default) keeps a checkpoint at
every drop step the grid needs. A recipe is (recalibration learning rate, warm-up as a share of the
recalibration steps, drope.qk_norm, recalibration share s of the budget): DroPE (offset-key-drope.yaml) starts
from the RoPE run's step T − S and recalibrates for S = s·T steps, so RoPE (T) and DroPE (T − S + S) have the same
budget. Each DroPE model gets its temperature fitted (drope-eval fit-temperature on held-out sequences) and is
scored by drope-eval offset-key at C, 2C, 4C, 8C; the seed's RoPE model (step T) at C on the same split.

  recovered      DroPE's accuracy at C >= the same seed's RoPE accuracy at C (same split, same sequences)
                 minus the tolerance (2 points)
  recovery rate  recovered seeds / seeds, with a Wilson 95 % interval (stats.wilson)
  accuracy       RoPE's and DroPE's accuracy at C, DroPE's on needles farther than C at 2C, 4C, 8C: mean over seeds
                 and the protocol's interval inside [0, 100] (stats.accuracy_interval: the bootstrap over seeds
                 widened to the Wilson interval of the queries pooled over seeds)

Schedules and schemes from scratch (docs/recovery-study.md#third-stage-recalibration-length-or-drop-step):
--drops 400:100,600:400 names each DroPE run by its drop step and recalibration steps instead of a share of T, so
the budget may differ from T (a pair on the budget is the share recipe of the same steps, the same runs); DroPE is
still compared with the seed's RoPE model at step T. --scratch alibi,rnope-swa also trains those schemes from scratch
for T steps on seeds 0..--scratch-seeds−1 (configs/train/offset-key-<name>.yaml) and scores them like DroPE,
without a temperature, after the selection.

Selection and confirmation:
  1. every recipe on the selection seeds (0..N−1), scored on the held-out split only (--split heldout);
  2. the selected recipe: most recovered seeds; ties broken by the higher mean held-out far accuracy (averaged
     over the far lengths), then the higher mean held-out accuracy at C, then grid order (select());
  3. the selected recipe alone on fresh confirmation seeds (1000.., disjoint from the selection seeds: new RoPE
     runs too), scored on the test split. Test sequences are never scored before the selection is made.

Layout of the study directory (default runs/recovery-study):
  settings.json                          what the files depend on (budget, queries, lengths, temperature);
                                         a later invocation with other values is refused
  train/rope-s<seed>/                    RoPE runs (checkpoints every gcd of the drop steps, all kept)
  train/drope-<recipe>-s<seed>/          DroPE runs; the final checkpoint holds temperature.json
  eval/rope-s<seed>-<split>.json         RoPE at C
  eval/drope-<recipe>-s<seed>-<split>.json   DroPE at C..8C
  train/<scheme>-s<seed>/, eval/<scheme>-s<seed>-heldout.json   --scratch: ALiBi, RNoPE-SWA from scratch, C..8C
  locks/<task>.lock                      claims (flock): one worker per task
  timing/<task>.json                     wall time of each task when it was computed
  study.{md,json,csv}                    the tables (written after the selection, again after the confirmation)

Resumable: finished runs, fits and evaluations are reused; a killed run resumes. Parallel-safe: the tasks (one
seed's RoPE run, one recipe × seed) run on --jobs workers of the scripts' one task runner (Driver.work), each
claimed with a lock file, so that any number of processes may also work on one directory; each tool runs
--threads threads (OMP_NUM_THREADS).

Usage: bash scripts/recovery_study.sh [--quick] [--jobs 2] [--seeds 10] [--out DIR] ...   (--help: every option)
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import itertools
import json
import math
import os
import pathlib
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from drope_scripts import cli, results
from drope_scripts.atomic import write_atomic
from drope_scripts.driver import (
    NONE,
    ROOT,
    Driver,
    Method,
    Task,
    ToolError,
    checkpoint,
    config_int,
    config_steps,
    train_state,
)
from drope_scripts.offset_key import DROPE_CONFIG, ROPE_CONFIG, TEMPERATURE_QUERIES, context, dump
from drope_scripts.offset_key_report import KIND, Cell, cell
from drope_scripts.stats import wilson

HELDOUT, TEST = "heldout", "test"
# Trained from scratch for the budget T beside RoPE (--scratch): the RoPE config with model.positional changed.
SCRATCH = {"alibi": "configs/train/offset-key-alibi.yaml", "rnope-swa": "configs/train/offset-key-rnope-swa.yaml"}
SCRATCH_LABELS = {"alibi": "ALiBi", "rnope-swa": "RNoPE-SWA"}
STUDY_KIND = "offset-key-recovery-study"
TOLERANCE = 2.0  # points: "within 2 points of RoPE"
ROPE_LEARNED = 90.0  # below this accuracy at C (%), the report notes that RoPE itself has not learned the task
CONFIRM_START = 1000
QK_NORMS = ("qk", "q", "k", "none")
# The default grid: the config's recipe (lr 1e-3, warm-up 10 % of the steps, QK-norm, 25 %) and the paper's
# (recalibration lr 10/3 of pretraining's, a warm-up of 70 of ~1,900 steps ≈ 4 %), with and without QK-norm,
# dropping at 7/8, 3/4 and 1/2 of the budget.
DEFAULT_LRS = (1e-3, 3e-3)
DEFAULT_WARMUPS = (0.1, 0.04)
DEFAULT_QK_NORMS = ("qk", "none")
DEFAULT_SHARES = (12.5, 25.0, 50.0)


# ---- recipes ------------------------------------------------------------------------------------------------

def _num(x: float) -> str:
    """A number for a file name: no dots (1e-03, 12p5)."""
    if x == float(f"{x:.0e}") and (x < 0.01 or x >= 1000):
        return f"{x:.0e}"
    return f"{x:g}".replace(".", "p")


@dataclass(frozen=True)
class Recipe:
    """One recalibration recipe: learning rate, warm-up (share of the recalibration steps), drope.qk_norm and
    the recalibration share of the total budget (%). A schedule (schedule()) instead names the drop step and the
    recalibration steps (`drop`, `recal`), whatever their sum: its budget may differ from the RoPE run's T, and
    its `share` is the recalibration share of its own budget."""

    lr: float
    warmup: float
    qk_norm: str
    share: float
    drop: int | None = None  # the RoPE step DroPE starts from (a schedule), else T − S
    recal: int | None = None  # recalibration steps (a schedule), else share · T

    @property
    def slug(self) -> str:
        head = f"lr{_num(self.lr)}-wu{_num(100 * self.warmup)}-norm{self.qk_norm}"
        return f"{head}-r{_num(self.share)}" if self.drop is None else f"{head}-d{self.drop}n{self.recal}"

    def steps(self, total: int) -> int:
        """Recalibration steps S of a total budget of `total` steps."""
        if self.drop is not None:
            if not 1 <= self.drop < total or self.recal < 1:
                raise ValueError(f"schedule {self.drop}:{self.recal}: the drop step must be in 1..{total - 1} "
                                 f"(a checkpoint of the {total}-step RoPE run) and the recalibration steps >= 1")
            return self.recal
        s = round(total * self.share / 100)
        if not 1 <= s < total:
            raise ValueError(f"recalibration share {self.share:g} % of {total} steps leaves {s} DroPE steps "
                             f"(need 1..{total - 1})")
        return s

    def start(self, total: int) -> int:
        """The RoPE step DroPE starts from."""
        return total - self.steps(total) if self.drop is None else self.drop

    def budget(self, total: int) -> int:
        """RoPE steps before the drop + recalibration steps (T unless a schedule says otherwise)."""
        return self.start(total) + self.steps(total)

    def schedule_text(self, total: int) -> str:
        """The report's 'DroPE steps' cell: '200 (25 %)', or '100 from step 400 (budget 500)' off the budget T."""
        if self.budget(total) == total:
            return f"{self.steps(total)} ({self.share:g} %)"
        return f"{self.steps(total)} from step {self.start(total)} (budget {self.budget(total)})"

    def warmup_steps(self, total: int) -> int:
        return round(self.warmup * self.steps(total))

    def describe(self, total: int) -> str:
        where = (f"({self.share:g} %)" if self.budget(total) == total else
                 f"(budget {self.budget(total)}, {self.share:.3g} % recalibration)")
        return (f"lr {self.lr:g}, warm-up {self.warmup_steps(total)} ({100 * self.warmup:g} %), QK-norm "
                f"{self.qk_norm}, DroPE {self.steps(total)} steps from step {self.start(total)} {where}")

    def overrides(self, total: int) -> list[str]:
        """drope-train --set values of the DroPE run (besides run.*)."""
        return [f"train.steps={self.steps(total)}", f"schedule.warmup={self.warmup_steps(total)}",
                f"optim.lr={self.lr!r}", f"drope.qk_norm={self.qk_norm}"]

    def doc(self, total: int) -> dict:
        return {"slug": self.slug, "lr": self.lr, "warmup_share": self.warmup, "warmup_steps": self.warmup_steps(total),
                "qk_norm": self.qk_norm, "recalibration_share": self.share, "drope_steps": self.steps(total),
                "drop_step": self.start(total), "budget": self.budget(total)}


def grid(lrs: Sequence[float], warmups: Sequence[float], qk_norms: Sequence[str],
         shares: Sequence[float]) -> tuple[Recipe, ...]:
    """Every combination, in this order: share, QK-norm, learning rate, warm-up (the order breaks last ties)."""
    return tuple(Recipe(lr, w, q, s) for s, q, lr, w in itertools.product(shares, qk_norms, lrs, warmups))


def schedule(lr: float, warmup: float, qk_norm: str, drop: int, steps: int, total: int) -> Recipe:
    """DroPE from the RoPE run's step `drop` for `steps` steps. On the budget T (drop + steps = total) it is the
    share recipe of the same steps (same slug: the runs are shared); off it, a recipe of its own budget."""
    if drop + steps == total:
        equal = Recipe(lr, warmup, qk_norm, 100 * steps / total)
        if 1 <= steps < total and equal.steps(total) == steps:
            return equal
    return Recipe(lr, warmup, qk_norm, 100 * steps / (drop + steps), drop, steps)


def schedule_grid(lrs: Sequence[float], warmups: Sequence[float], qk_norms: Sequence[str],
                  drops: Sequence[tuple[int, int]], total: int) -> tuple[Recipe, ...]:
    """grid() with (drop step, recalibration steps) pairs in place of the shares, in the pairs' order first."""
    return tuple(schedule(lr, w, q, d, s, total)
                 for (d, s), q, lr, w in itertools.product(drops, qk_norms, lrs, warmups))


def confirmation_seeds(selection: Sequence[int], n: int, start: int = CONFIRM_START) -> tuple[int, ...]:
    """n fresh seeds from `start`; refused where they meet a selection seed."""
    seeds = tuple(range(start, start + n))
    shared = sorted(set(seeds) & set(selection))
    if shared:
        raise ValueError(f"confirmation seeds {start}..{start + n - 1} include selection seeds {shared}")
    return seeds


# ---- statistics, the decision, the selection -----------------------------------------------------------------

def recovered(drope_acc: float, rope_acc: float, tolerance: float = TOLERANCE) -> bool:
    """DroPE's accuracy at C reaches RoPE's (same seed, same sequences) within `tolerance` points."""
    return drope_acc >= rope_acc - tolerance


@dataclass(frozen=True)
class SeedResult:
    """One recipe × seed on one split: RoPE's and DroPE's accuracy at C, DroPE's far accuracy per multiple of C."""

    recipe: str  # Recipe.slug
    seed: int
    split: str  # heldout | test
    rope_acc: float
    drope_acc: float
    far: dict[int, float]  # multiplier (> 1) → far accuracy (%)
    temperature: float | None = None  # the fitted c, where fitted
    # Query counts (correct, queries) behind rope_acc, drope_acc and far, where the results files carry them.
    rope_counts: tuple[int, int] | None = None
    drope_counts: tuple[int, int] | None = None
    far_counts: dict[int, tuple[int, int]] | None = None

    def recovered(self, tolerance: float = TOLERANCE) -> bool:
        return recovered(self.drope_acc, self.rope_acc, tolerance)


def _pooled(counts: Sequence[tuple[int, int] | None]) -> tuple[int, int] | None:
    """Counts summed over seeds; None when a seed has none."""
    if any(c is None for c in counts):
        return None
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def recipe_summary(rows: Sequence[SeedResult], multipliers: Sequence[int], tolerance: float = TOLERANCE) -> dict:
    """Recovery count, rate and Wilson interval (stats.wilson); accuracy at C (DroPE, RoPE) and far accuracy per
    length over seeds (offset_key_report.cell: mean, the t interval's half-width, and the protocol's interval inside
    [0, 100], widened to the Wilson interval of the pooled query counts where the rows carry them)."""
    if not rows:
        raise ValueError("recipe_summary: no seeds")
    k, n = sum(r.recovered(tolerance) for r in rows), len(rows)
    lo, hi = wilson(k, n)
    seeds = [r.seed for r in rows]
    far = {str(m): cell([r.far[m] for r in rows], seeds,
                        _pooled([None if r.far_counts is None else r.far_counts.get(m) for r in rows]))
           for m in multipliers if m > 1}
    return {"n": n, "recovered": k, "rate": k / n, "wilson_low": lo, "wilson_high": hi,
            "seeds": seeds, "recovered_seeds": [r.seed for r in rows if r.recovered(tolerance)],
            "accuracy": cell([r.drope_acc for r in rows], seeds, _pooled([r.drope_counts for r in rows])),
            "rope_accuracy": cell([r.rope_acc for r in rows], seeds, _pooled([r.rope_counts for r in rows])),
            "far": far}


def mean_far(summary: dict) -> float:
    """The mean over the far lengths of a recipe_summary's mean far accuracies (0 without far lengths)."""
    means = [cell["mean"] for cell in summary["far"].values()]
    return sum(means) / len(means) if means else 0.0


def select(rows: Sequence[SeedResult], recipes: Sequence[Recipe], seeds: Sequence[int], multipliers: Sequence[int],
           tolerance: float = TOLERANCE) -> tuple[Recipe, list[dict]]:
    """The selected recipe and the ranking of all, from the HELD-OUT rows of the selection `seeds` only (rows of
    the test split or of other seeds are ignored): most recovered seeds, then the higher mean far accuracy, then
    the higher mean accuracy at C, then grid order. Every recipe needs a held-out row for every seed."""
    wanted = set(seeds)
    held = {(r.recipe, r.seed): r for r in rows if r.split == HELDOUT and r.seed in wanted}
    ranking = []
    for i, recipe in enumerate(recipes):
        missing = [s for s in seeds if (recipe.slug, s) not in held]
        if missing:
            raise ValueError(f"selection: {recipe.slug} has no held-out result for seed(s) {missing}")
        summary = recipe_summary([held[recipe.slug, s] for s in seeds], multipliers, tolerance)
        ranking.append({"recipe": recipe, "order": i, "summary": summary,
                        "key": (-summary["recovered"], -mean_far(summary), -summary["accuracy"]["mean"], i)})
    ranking.sort(key=lambda e: e["key"])
    for rank, e in enumerate(ranking, 1):
        e["rank"] = rank
    return ranking[0]["recipe"], ranking


# ---- settings ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Study:
    out: pathlib.Path
    recipes: tuple[Recipe, ...]
    seeds: tuple[int, ...]  # selection
    confirm: tuple[int, ...]  # confirmation (fresh)
    steps: int  # total budget T
    queries: int
    multipliers: tuple[int, ...]
    temperature: str  # auto (fitted) | a number c
    fit_queries: int
    tolerance: float
    threads: int
    scratch: tuple[str, ...] = ()  # positional schemes trained from scratch (SCRATCH), beside RoPE
    scratch_seeds: tuple[int, ...] = ()

    @property
    def c(self) -> int:
        return context(ROOT / ROPE_CONFIG)

    def identity(self) -> dict:
        """What the files of the directory depend on (settings.json)."""
        return {"steps": self.steps, "train_length": self.c, "queries": self.queries,
                "multipliers": list(self.multipliers), "temperature": self.temperature,
                "fit_queries": self.fit_queries}

    def rope_every(self) -> int:
        """checkpoint_every of the RoPE runs: the gcd of every drop step and T (so each is kept)."""
        return math.gcd(self.steps, *(r.start(self.steps) for r in self.recipes))

    def fits(self) -> bool:
        return self.temperature == "auto" and any(m > 1 for m in self.multipliers)


def check_settings(st: Study) -> None:
    """Writes settings.json, or refuses a directory made with other settings."""
    path = st.out / "settings.json"
    mine = st.identity()
    if not path.is_file():
        write_atomic(path, dump({"kind": "recovery-study-settings", **mine}))
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: cannot read: {e}") from e
    diff = [k for k in mine if found.get(k) != mine[k]]
    if diff:
        raise ValueError(f"{path}: this study directory was made with " +
                         ", ".join(f"{k} {json.dumps(found.get(k))}" for k in diff) + " (now " +
                         ", ".join(f"{k} {json.dumps(mine[k])}" for k in diff) + "): use another --out")


# ---- tasks ---------------------------------------------------------------------------------------------------

class Runner:
    """The tasks of one study directory: train, fit, evaluate, and read back the per-seed results."""

    def __init__(self, st: Study, d: Driver):
        self.st, self.d = st, d

    # paths
    def rope_dir(self, seed: int) -> pathlib.Path:
        return self.st.out / "train" / f"rope-s{seed}"

    def drope_dir(self, recipe: Recipe, seed: int) -> pathlib.Path:
        return self.st.out / "train" / f"drope-{recipe.slug}-s{seed}"

    def rope_eval(self, seed: int, split: str) -> pathlib.Path:
        return self.st.out / "eval" / f"rope-s{seed}-{split}"

    def drope_eval(self, recipe: Recipe, seed: int, split: str) -> pathlib.Path:
        return self.st.out / "eval" / f"drope-{recipe.slug}-s{seed}-{split}"

    # steps
    def scratch_dir(self, name: str, seed: int) -> pathlib.Path:
        return self.st.out / "train" / f"{name}-s{seed}"

    def scratch_eval(self, name: str, seed: int, split: str) -> pathlib.Path:
        return self.st.out / "eval" / f"{name}-s{seed}-{split}"

    def pretrain(self, config: pathlib.Path, run_dir: pathlib.Path, name: str, seed: int, every: int) -> None:
        """T steps from scratch of `config` (its warm-up scaled with the budget), checkpoints every `every`."""
        st = self.st
        overrides = [f"run.name=recovery-{name}-s{seed}", f"run.seed={seed}", f"train.steps={st.steps}",
                     f"train.checkpoint_every={every}", f"train.keep_last={st.steps // every}"]
        base = config_steps(config)
        if st.steps != base:  # the warm-up scales with the budget
            warmup = config_int(config, "schedule", "warmup")
            overrides.append(f"schedule.warmup={max(1, round(warmup * st.steps / base))}")
        if train_state(run_dir, st.steps) != "finished":
            self.d.say(f"{name} seed {seed}: training {st.steps} steps")
            self.d.train(config, run_dir, st.steps, overrides, show=NONE)

    def train_rope(self, seed: int) -> None:
        self.pretrain(ROOT / ROPE_CONFIG, self.rope_dir(seed), "rope", seed, self.st.rope_every())

    def train_drope(self, recipe: Recipe, seed: int) -> pathlib.Path:
        st, run_dir = self.st, self.drope_dir(recipe, seed)
        steps, start = recipe.steps(st.steps), recipe.start(st.steps)
        init = checkpoint(self.rope_dir(seed), start)
        state = train_state(run_dir, steps)
        if state == "fresh" and not (init / "model.safetensors").is_file():
            raise ValueError(f"{init} is missing (the RoPE run keeps checkpoints every {st.rope_every()} steps of "
                             "this grid; a drop step it did not keep needs another --out)")
        if state != "finished":
            self.d.say(f"{recipe.slug} seed {seed}: DroPE {steps} steps from step {start}")
            self.d.train(ROOT / DROPE_CONFIG, run_dir, steps, [f"run.name=recovery-drope-{recipe.slug}-s{seed}",
                                                        f"run.seed={seed}", *recipe.overrides(st.steps)],
                         [f"run.init={init}"], show=NONE)
        return checkpoint(run_dir, steps)

    def evaluate(self, label: str, model: pathlib.Path, prefix: pathlib.Path, lengths: Sequence[int], seed: int,
                 split: str, options: Sequence[object] = ()) -> None:
        method = Method(label, model, (*map(str, options), "--threads", str(self.st.threads)))
        self.d.evaluate(KIND, method, prefix, ("--lengths", ",".join(map(str, lengths)), "--queries",
                                               self.st.queries, "--seed", seed, "--split", split), KIND)

    def rope_task(self, seed: int, split: str) -> Task:
        prefix = self.rope_eval(seed, split)

        def run() -> None:
            self.train_rope(seed)
            self.evaluate("RoPE", checkpoint(self.rope_dir(seed), self.st.steps), prefix, [self.st.c], seed, split)

        return Task(f"rope-s{seed}-{split}", (), lambda: json_of(prefix).is_file(), run)

    def drope_task(self, recipe: Recipe, seed: int, split: str) -> Task:
        st, prefix = self.st, self.drope_eval(recipe, seed, split)

        def run() -> None:
            model = self.train_drope(recipe, seed)
            options: tuple[object, ...] = ()
            if st.fits():
                if not (model / "temperature.json").is_file():
                    fit = ",".join(str(m) for m in st.multipliers if m > 1)
                    self.d.tool("drope-eval", "fit-temperature", "--model", model, "--task", KIND, "--multipliers", fit,
                                "--queries", st.fit_queries, "--threads", st.threads, show=NONE)
                options = ("--temperature", "auto")
            elif st.temperature != "auto":
                options = ("--temperature", st.temperature)
            self.evaluate("DroPE", model, prefix, [m * st.c for m in st.multipliers], seed, split, options)

        return Task(f"drope-{recipe.slug}-s{seed}-{split}", (f"rope-s{seed}-{split}",),
                    lambda: json_of(prefix).is_file(), run)

    def scratch_task(self, name: str, seed: int, split: str) -> Task:
        """One scheme from scratch (T steps, final checkpoint only) scored at every length, no temperature."""
        st, prefix = self.st, self.scratch_eval(name, seed, split)

        def run() -> None:
            self.pretrain(ROOT / SCRATCH[name], self.scratch_dir(name, seed), name, seed, st.steps)
            self.evaluate(SCRATCH_LABELS[name], checkpoint(self.scratch_dir(name, seed), st.steps), prefix,
                          [m * st.c for m in st.multipliers], seed, split)

        return Task(f"{name}-s{seed}-{split}", (), lambda: json_of(prefix).is_file(), run)

    def tasks(self, recipes: Sequence[Recipe], seeds: Sequence[int], split: str) -> list[Task]:
        """Seed by seed: the RoPE run, then every recipe from it."""
        out = []
        for seed in seeds:
            out.append(self.rope_task(seed, split))
            out += [self.drope_task(r, seed, split) for r in recipes]
        return out

    # reading back
    def result(self, recipe: Recipe, seed: int, split: str) -> SeedResult:
        st = self.st
        fit = checkpoint(self.drope_dir(recipe, seed), recipe.steps(st.steps)) / "temperature.json"
        c = None
        if st.fits() and fit.is_file():
            c = results.load(fit, "temperature")["c"]
        elif st.temperature != "auto":
            c = float(st.temperature)
        return self.read_back(recipe.slug, self.drope_eval(recipe, seed, split), seed, split, c)

    def scratch_result(self, name: str, seed: int, split: str) -> SeedResult:
        """A scheme from scratch as a SeedResult (recipe = its name): 'recovered' = within the tolerance of the
        seed's RoPE model at C."""
        return self.read_back(name, self.scratch_eval(name, seed, split), seed, split, None)

    def read_back(self, label: str, prefix: pathlib.Path, seed: int, split: str, c: float | None) -> SeedResult:
        """The evaluation at `prefix` against the seed's RoPE evaluation: accuracy at C and far accuracy."""
        st = self.st
        rope = read_eval(json_of(self.rope_eval(seed, split)), seed, split)
        drope = read_eval(json_of(prefix), seed, split)
        where = json_of(prefix)
        far, far_counts = {}, {}
        for m in st.multipliers:
            if m == 1:
                continue
            row = drope.get(m * st.c)
            if row is None or row.get("far_accuracy") is None:
                raise results.ResultsError(f"{where}: no far accuracy at length {m * st.c}")
            far[m], far_counts[m] = row["far_accuracy"], counts_of(row, "far_correct", "far_queries")
        for path, rows in ((json_of(self.rope_eval(seed, split)), rope), (where, drope)):
            if st.c not in rows:
                raise results.ResultsError(f"{path}: no result at C = {st.c}")
        return SeedResult(label, seed, split, rope[st.c]["accuracy"], drope[st.c]["accuracy"], far, c,
                          counts_of(rope[st.c], "correct", "queries"), counts_of(drope[st.c], "correct", "queries"),
                          far_counts)


def json_of(prefix: pathlib.Path) -> pathlib.Path:
    return prefix.with_name(prefix.name + ".json")


def counts_of(row: dict, correct: str, total: str) -> tuple[int, int] | None:
    """(correct, queries) of an offset-key results row, or None when it has no counts."""
    if row.get(correct) is None or row.get(total) is None:
        return None
    return int(row[correct]), int(row[total])


def read_eval(path: pathlib.Path, seed: int, split: str) -> dict[int, dict]:
    """An offset-key results file's rows by length, after checking it scored `split` with `seed`."""
    doc = results.load(path, KIND)
    if doc.get("index_split") != split or doc.get("seed") != seed:
        raise results.ResultsError(f"{path}: index_split {json.dumps(doc.get('index_split'))}, seed "
                                   f"{json.dumps(doc.get('seed'))}; expected {split}, {seed}")
    return {r["length"]: r for r in doc.get("results", [])}


# ---- the report ----------------------------------------------------------------------------------------------

def _cell(d: dict | None) -> str:
    return "–" if d is None else Cell.of(d).text()


def _rate(s: dict) -> str:
    lo, hi = 100 * s["wilson_low"], 100 * s["wilson_high"]
    return f"{s['recovered']}/{s['n']} = {100 * s['rate']:.0f} % [{lo:.0f}, {hi:.0f}]"


def _seeds(seeds: Sequence[int]) -> str:
    if seeds and list(seeds) == list(range(seeds[0], seeds[0] + len(seeds))):
        return f"{seeds[0]}–{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
    return ", ".join(map(str, seeds))


def build_doc(st: Study, ranking: list[dict], selected: Recipe, held: list[SeedResult],
              confirmation: list[SeedResult] | None, timing: dict, scratch: list[SeedResult] | None = None) -> dict:
    far_ms = [m for m in st.multipliers if m > 1]
    doc = {"schema": results.SCHEMA, "schema_version": results.SCHEMA_VERSION, "kind": STUDY_KIND,
           "settings": {**st.identity(), "tolerance": st.tolerance, "confidence": 0.95,
                        "selection_seeds": list(st.seeds), "confirmation_seeds": list(st.confirm),
                        "rope_checkpoint_every": st.rope_every()},
           "grid": [r.doc(st.steps) for r in st.recipes],
           "selection": {"split": HELDOUT, "seeds": list(st.seeds),
                         "rule": "most recovered seeds; ties: higher mean far accuracy over "
                                 f"{', '.join(f'{m}C' for m in far_ms) or '(none)'}, then higher mean accuracy at C, "
                                 "then grid order",
                         "selected": selected.slug,
                         "ranking": [{"rank": e["rank"], "recipe": e["recipe"].slug, "mean_far": mean_far(e["summary"]),
                                      **e["summary"]} for e in ranking]},
           "confirmation": None, "timing": timing,
           "per_seed": [seed_doc(r, "selection", st.tolerance) for r in held]}
    if scratch:
        doc["scratch"] = {"split": HELDOUT, "seeds": list(st.scratch_seeds),
                          "configs": {n: SCRATCH[n] for n in st.scratch},
                          "summary": {n: recipe_summary([r for r in scratch if r.recipe == n], st.multipliers,
                                                        st.tolerance) for n in st.scratch}}
        doc["per_seed"] += [seed_doc(r, "scratch", st.tolerance) for r in scratch]
    if confirmation is not None:
        doc["confirmation"] = {"split": TEST, "seeds": list(st.confirm), "recipe": selected.slug,
                               **recipe_summary(confirmation, st.multipliers, st.tolerance)}
        doc["per_seed"] += [seed_doc(r, "confirmation", st.tolerance) for r in confirmation]
    return doc


def seed_doc(r: SeedResult, phase: str, tolerance: float) -> dict:
    return {"phase": phase, "split": r.split, "recipe": r.recipe, "seed": r.seed, "rope_acc": r.rope_acc,
            "drope_acc": r.drope_acc, "recovered": r.recovered(tolerance), "temperature": r.temperature,
            "far": {str(m): v for m, v in r.far.items()}}


def csv_text(st: Study, doc: dict) -> str:
    recipes = {r["slug"]: r for r in doc["grid"]}
    far_ms = [m for m in st.multipliers if m > 1]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["phase", "split", "recipe", "lr", "warmup_share", "warmup_steps", "qk_norm", "recalibration_share",
                "drope_steps", "drop_step", "seed", "rope_acc_C", "drope_acc_C", "recovered", "temperature_c",
                *(f"far_{m}C" for m in far_ms), "budget"])
    keys = ("lr", "warmup_share", "warmup_steps", "qk_norm", "recalibration_share", "drope_steps", "drop_step")
    for s in doc["per_seed"]:
        r = recipes.get(s["recipe"])  # None: a scheme from scratch (its row's accuracy is the scheme's)
        w.writerow([s["phase"], s["split"], s["recipe"], *(("",) * len(keys) if r is None else (r[k] for k in keys)),
                    s["seed"], f"{s['rope_acc']:.2f}", f"{s['drope_acc']:.2f}", int(s["recovered"]),
                    "" if s["temperature"] is None else f"{s['temperature']:.4f}",
                    *(f"{s['far'][str(m)]:.2f}" for m in far_ms), st.steps if r is None else r["budget"]])
    return buf.getvalue()


def markdown(st: Study, doc: dict) -> str:
    T, c = st.steps, st.c
    far_ms = [m for m in st.multipliers if m > 1]
    recipes = {r.slug: r for r in st.recipes}
    temp = ("its fitted temperature (drope-eval fit-temperature on held-out sequences)" if st.fits()
            else f"temperature c = {st.temperature}" if st.temperature != "auto" else "no temperature")
    lines = [
        "# DroPE recovery study (offset-key)", "",
        f"Equal budget of {T} steps per seed: RoPE (configs/train/offset-key-rope.yaml) for {T} steps; DroPE "
        f"(offset-key-drope.yaml) from the RoPE run's step {T} − S for S steps. C = {c}; {st.queries} queries per "
        f"length and seed; DroPE scored with {temp}.",
        f"**Recovered**: DroPE's accuracy at C ≥ the same seed's RoPE accuracy at C (step {T}, same split and "
        f"sequences) − {st.tolerance:g} points. **Rate**: recovered / seeds, Wilson 95 % interval. **Far**: DroPE's "
        "accuracy (%) on needles farther than C from their query. Accuracies: mean over seeds [95 % interval: the "
        "bootstrap over seeds widened to the Wilson interval of the queries pooled over seeds, inside 0–100; with "
        "one seed the Wilson interval alone].", ""]
    if any(r.budget(T) != T for r in st.recipes):
        lines += [f"Schedules off the budget (drop step + recalibration steps ≠ {T}) are compared with the same RoPE "
                  f"model (step {T}); their ranking below is not an equal-budget selection.", ""]
    lines += [
        "## Selection protocol", "",
        f"1. Every recipe of the grid ({len(st.recipes)}) runs on the selection seeds {_seeds(st.seeds)} and is "
        "scored on the **held-out** split of the offset-key index space only (`drope-eval offset-key --split "
        "heldout`); no test sequence is scored before the choice.",
        f"2. Selected: {doc['selection']['rule']}.",
        (f"3. The selected recipe alone runs again on fresh seeds {_seeds(st.confirm)} (new RoPE runs; the selection "
         "never saw them) and is scored on the **test** split: those are the study's numbers. The held-out numbers "
         "of the selected recipe are biased upward by the choice." if st.confirm else
         "3. No confirmation here (--confirm-seeds 0): these are held-out numbers only, and those of the selected "
         "recipe are biased upward by the choice."), "",
        f"## Selection: held-out split, seeds {_seeds(st.seeds)}", "",
        "| rank | recipe | lr | warm-up | QK-norm | DroPE steps (share) | recovered [Wilson 95 %] | RoPE acc@C | "
        "DroPE acc@C | " + " | ".join(f"far {m}C" for m in far_ms) + " |",
        "|---:|---|---:|---:|---|---:|---|---:|---:|" + "---:|" * len(far_ms)]
    for e in doc["selection"]["ranking"]:
        r = recipes[e["recipe"]]
        mark = " **(selected)**" if e["recipe"] == doc["selection"]["selected"] else ""
        lines.append(f"| {e['rank']} | `{r.slug}`{mark} | {r.lr:g} | {r.warmup_steps(T)} ({100 * r.warmup:g} %) | "
                     f"{r.qk_norm} | {r.schedule_text(T)} | {_rate(e)} | {_cell(e['rope_accuracy'])} | "
                     f"{_cell(e['accuracy'])} | " + " | ".join(_cell(e["far"][str(m)]) for m in far_ms) + " |")
    lines += ["", f"## Confirmation: test split, fresh seeds {_seeds(st.confirm)}" if st.confirm else "## Confirmation",
              ""]
    conf = doc["confirmation"]
    if not st.confirm:
        lines.append("No confirmation seeds (--confirm-seeds 0).")
    elif conf is None:
        lines.append("Not run yet.")
    else:
        r = recipes[conf["recipe"]]
        lines += [f"Recipe `{r.slug}`: {r.describe(T)}.", "",
                  "| recovered [Wilson 95 %] | RoPE acc@C | DroPE acc@C | " +
                  " | ".join(f"far {m}C" for m in far_ms) + " |",
                  "|---|---:|---:|" + "---:|" * len(far_ms),
                  f"| {_rate(conf)} | {_cell(conf['rope_accuracy'])} | {_cell(conf['accuracy'])} | " +
                  " | ".join(_cell(conf["far"][str(m)]) for m in far_ms) + " |", "",
                  f"Recovered seeds: {', '.join(map(str, conf['recovered_seeds'])) or 'none'}; not recovered: "
                  f"{', '.join(str(s) for s in conf['seeds'] if s not in conf['recovered_seeds']) or 'none'}."]
    lines += scratch_lines(st, doc)
    weak = sorted({s["seed"] for s in doc["per_seed"] if s["rope_acc"] < ROPE_LEARNED})
    if weak:
        lines += ["", f"**Note**: RoPE scores below {ROPE_LEARNED:g} % at C in seed(s) {', '.join(map(str, weak))}: "
                  "there, DroPE is measured against a RoPE model that has not learned the task."]
    t = doc["timing"]
    lines += ["", f"Compute: {t['tasks']} task(s) timed, {t['seconds']:.0f} s in all (summed over workers). "
              "Per seed: study.csv.", ""]
    return "\n".join(lines)


def scratch_lines(st: Study, doc: dict) -> list[str]:
    """The report's section on the schemes trained from scratch (none without them)."""
    if "scratch" not in doc:
        return []
    far_ms = [m for m in st.multipliers if m > 1]
    sc = doc["scratch"]
    lines = ["", f"## From scratch: held-out split, seeds {_seeds(sc['seeds'])}", "",
             f"Each scheme trained {st.steps} steps from scratch (the RoPE config with `model.positional` changed), "
             "scored without a temperature; 'within tolerance' = accuracy at C ≥ the seed's RoPE model's − "
             f"{st.tolerance:g} points.", "",
             "| scheme | config | within tolerance [Wilson 95 %] | RoPE acc@C | acc@C | " +
             " | ".join(f"far {m}C" for m in far_ms) + " |",
             "|---|---|---|---:|---:|" + "---:|" * len(far_ms)]
    for name, s in sc["summary"].items():
        lines.append(f"| {SCRATCH_LABELS[name]} | `{sc['configs'][name]}` | {_rate(s)} | {_cell(s['rope_accuracy'])} | "
                     f"{_cell(s['accuracy'])} | " + " | ".join(_cell(s["far"][str(m)]) for m in far_ms) + " |")
    return lines


def timing(out: pathlib.Path) -> dict:
    seconds, n = 0.0, 0
    for p in sorted((out / "timing").glob("*.json")):
        with contextlib.suppress(OSError, ValueError, KeyError):
            seconds += float(json.loads(p.read_text(encoding="utf-8"))["seconds"])
            n += 1
    return {"tasks": n, "seconds": seconds}


def write_report(st: Study, doc: dict) -> str:
    text = markdown(st, doc)
    write_atomic(st.out / "study.json", dump(doc))
    write_atomic(st.out / "study.csv", csv_text(st, doc))
    write_atomic(st.out / "study.md", text)
    return text


# ---- the study ---------------------------------------------------------------------------------------------

def run(st: Study, d: Driver, poll: float) -> str:
    """Selection, then confirmation (module docstring), then the report. Returns its Markdown."""
    (st.out / "eval").mkdir(parents=True, exist_ok=True)
    (st.out / "train").mkdir(parents=True, exist_ok=True)
    check_settings(st)
    runner = Runner(st, d)
    d.stage(f"selection: {len(st.recipes)} recipe(s) × {len(st.seeds)} seed(s), held-out split")
    d.work(runner.tasks(st.recipes, st.seeds, HELDOUT), st.out, poll)
    held = [runner.result(r, s, HELDOUT) for r in st.recipes for s in st.seeds]
    selected, ranking = select(held, st.recipes, st.seeds, st.multipliers, st.tolerance)
    write_report(st, build_doc(st, ranking, selected, held, None, timing(st.out)))
    scratch = None
    if st.scratch:
        d.stage(f"from scratch: {', '.join(st.scratch)} × {len(st.scratch_seeds)} seed(s), held-out split")
        d.work([runner.scratch_task(n, s, HELDOUT) for s in st.scratch_seeds for n in st.scratch], st.out, poll)
        scratch = [runner.scratch_result(n, s, HELDOUT) for n in st.scratch for s in st.scratch_seeds]
        write_report(st, build_doc(st, ranking, selected, held, None, timing(st.out), scratch))
    d.stage(f"selected {selected.slug} ({selected.describe(st.steps)}); confirmation: {len(st.confirm)} fresh "
            "seed(s), test split")
    confirmation = None
    if st.confirm:
        d.work(runner.tasks([selected], st.confirm, TEST), st.out, poll)
        confirmation = [runner.result(selected, s, TEST) for s in st.confirm]
    text = write_report(st, build_doc(st, ranking, selected, held, confirmation, timing(st.out), scratch))
    d.stage(f"done: {st.out}/study.md")
    return text


# ---- command line ------------------------------------------------------------------------------------------

# The longest sequence drope-eval evaluates (kMaxEvalTokens in include/drope/eval/runners.h): --multipliers × C
# beyond it would be refused by drope-eval only after the training.
MAX_EVAL_TOKENS = 1 << 22
MAX_TEMPERATURE = 10.0  # c in β = 1 + c·ln(L/C): 10 makes β ≈ 22 at 8C; fitted values are below 1

QUICK = {"seeds": 2, "confirm_seeds": 2, "steps": 80, "queries": 200, "fit_queries": 64, "lrs": (1e-3, 3e-3),
         "warmups": (0.1,), "qk_norms": ("qk",), "shares": (25.0,), "out": "runs/recovery-study-quick"}
DEFAULTS = {"seeds": 10, "confirm_seeds": None, "steps": None, "queries": 1000, "fit_queries": TEMPERATURE_QUERIES,
            "lrs": DEFAULT_LRS, "warmups": DEFAULT_WARMUPS, "qk_norms": DEFAULT_QK_NORMS, "shares": DEFAULT_SHARES,
            "out": "runs/recovery-study"}


def _names(text: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in text.split(",") if v.strip())
    if not values:
        raise argparse.ArgumentTypeError("an empty list")
    return values


def _pairs(text: str) -> tuple[tuple[int, int], ...]:
    """--drops: a comma list of DROP:STEPS, each a positive ASCII integer."""
    pairs = []
    for item in (v.strip() for v in text.split(",")):
        parts = item.split(":")
        if len(parts) != 2 or not all(cli.ascii_digits(x) and int(x) >= 1 for x in parts):
            raise argparse.ArgumentTypeError(f"expected a comma list of DROP:STEPS pairs of positive integers "
                                             f"(e.g. 400:100,600:400), got '{text}'")
        pairs.append((int(parts[0]), int(parts[1])))
    return tuple(pairs)


def parse(argv: list[str]) -> tuple[argparse.Namespace, Study]:
    """The options, every one checked before any work (drope_scripts.cli: one line naming the flag, exit 2).
    Numbers are ASCII and finite; the ranges are in the --help text."""
    ap = cli.Parser("recovery_study", prog="scripts/recovery_study.sh", description=__doc__.splitlines()[0])
    integer, ints = cli.int_type(), cli.int_list_type(1)
    ap.add_argument("--out", type=pathlib.Path, help="study directory (default runs/recovery-study)")
    ap.add_argument("--seeds", type=integer, help="selection seeds 0..N-1, N >= 1 (default 10)")
    ap.add_argument("--confirm-seeds", type=integer,
                    help="fresh confirmation seeds, >= 0 (default: as many as --seeds)")
    ap.add_argument("--confirm-start", type=integer, default=CONFIRM_START,
                    help=f"first confirmation seed, >= 0 (default {CONFIRM_START})")
    ap.add_argument("--steps", type=integer, help="total budget T in steps, >= 1 (default: the RoPE config's 800)")
    ap.add_argument("--lrs", type=cli.float_list_type(0, 1, lo_open=True),
                    help="recalibration learning rates, each in (0, 1] (default 1e-3,3e-3)")
    ap.add_argument("--warmups", type=cli.float_list_type(0, 1),
                    help="warm-up as a share of the recalibration steps, each in [0, 1] (default 0.1,0.04)")
    ap.add_argument("--qk-norms", type=_names, help=f"drope.qk_norm values, each one of {', '.join(QK_NORMS)} "
                    "(default qk,none)")
    ap.add_argument("--shares", type=cli.float_list_type(),
                    help="recalibration share of the budget, %% (default 12.5,25,50: drop at 700, 600, 400 of 800); "
                         "each must leave 1..T-1 DroPE steps")
    ap.add_argument("--drops", type=_pairs,
                    help="DroPE schedules instead of --shares: a comma list of DROP:STEPS (from the RoPE run's step "
                         "DROP, 1..T-1, for STEPS recalibration steps; their sum may differ from T; a pair on the "
                         "budget is the --shares recipe of the same steps)")
    ap.add_argument("--scratch", type=_names,
                    help=f"schemes also trained from scratch for T steps and scored like DroPE, without a "
                         f"temperature, each one of {', '.join(SCRATCH)} (default none)")
    ap.add_argument("--scratch-seeds", type=integer,
                    help="seeds 0..N-1 of --scratch, 1 <= N <= --seeds (they pair with the seed's RoPE run; "
                         "default 5, or --seeds if fewer)")
    ap.add_argument("--multipliers", type=ints, default=(1, 2, 4, 8),
                    help="lengths as multiples of C: distinct integers, 1 included, each at most "
                         f"{MAX_EVAL_TOKENS:,} tokens / C (drope-eval's longest sequence; 32768 at C = 128) "
                         "(default 1,2,4,8)")
    ap.add_argument("--queries", type=integer, help="queries per length and seed, >= 1 (default 1000)")
    ap.add_argument("--fit-queries", type=integer,
                    help=f"temperature-fit queries per length, >= 1 (default {TEMPERATURE_QUERIES})")
    ap.add_argument("--temperature", default="auto",
                    help=f"DroPE's temperature: auto (fitted, default) or a number c in [0, {MAX_TEMPERATURE:g}]")
    ap.add_argument("--tolerance", type=cli.float_type(0, 100), default=TOLERANCE,
                    help="recovery tolerance in accuracy points, in [0, 100] (default 2)")
    ap.add_argument("--jobs", type=integer, default=1, help="tasks run side by side, >= 1 (default 1)")
    ap.add_argument("--threads", type=integer, default=1,
                    help="threads of each tool, >= 1 (OMP_NUM_THREADS; default 1)")
    cli.add_build_option(ap, "DROPE_BIN", dest="bin")
    ap.add_argument("--poll", type=cli.float_type(0, 3600, lo_open=True), default=10.0,
                    help="seconds between looks at tasks other workers hold, in (0, 3600] (default 10)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke test: 2 + 2 seeds, 80 steps, lr 1e-3 and 3e-3 at 25 %%, 200 queries")
    a = ap.parse_args(argv)
    if a.drops is not None and a.shares is not None:
        ap.error("--drops and --shares: give one of them (--drops names the drop step and the steps itself)")
    base = {**DEFAULTS, **(QUICK if a.quick else {})}
    for key, value in base.items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    a.out = ap.check(cli.out_dir, cli.caller_path(a.out).resolve(), "--out")
    if a.steps is None:
        a.steps = config_steps(ROOT / ROPE_CONFIG)
    if a.confirm_seeds is None:
        a.confirm_seeds = a.seeds
    for name in ("seeds", "steps", "queries", "fit_queries", "jobs", "threads"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if a.confirm_seeds < 0 or a.confirm_start < 0:
        ap.error("--confirm-seeds and --confirm-start must be >= 0")
    if 1 not in a.multipliers or len(set(a.multipliers)) != len(a.multipliers):
        ap.error(f"--multipliers: distinct positive integers including 1 (C), got {','.join(map(str, a.multipliers))}")
    c = context(ROOT / ROPE_CONFIG)
    if max(a.multipliers) * c > MAX_EVAL_TOKENS:
        ap.error(f"--multipliers: {max(a.multipliers)} x C = {max(a.multipliers) * c:,} tokens, more than the "
                 f"{MAX_EVAL_TOKENS:,} drope-eval evaluates (at most {MAX_EVAL_TOKENS // c} at C = {c})")
    if any(q not in QK_NORMS for q in a.qk_norms):
        ap.error(f"--qk-norms: each one of {', '.join(QK_NORMS)}, got {','.join(a.qk_norms)}")
    if a.temperature != "auto":
        try:
            cli.to_float(a.temperature, "--temperature", 0, MAX_TEMPERATURE)
        except cli.UsageError:
            ap.error(f"--temperature must be auto or a finite number in [0, {MAX_TEMPERATURE:g}], got "
                     f"'{a.temperature}'")
    if a.scratch_seeds is None:
        a.scratch_seeds = min(5, a.seeds)
    if a.scratch is not None:
        if any(n not in SCRATCH for n in a.scratch) or len(set(a.scratch)) != len(a.scratch):
            ap.error(f"--scratch: distinct names, each one of {', '.join(SCRATCH)}, got {','.join(a.scratch)}")
        if not 1 <= a.scratch_seeds <= a.seeds:
            ap.error(f"--scratch-seeds must be in 1..{a.seeds} (--seeds: each pairs with the seed's RoPE run), "
                     f"got {a.scratch_seeds}")
    if a.drops is None:
        recipes = grid(a.lrs, a.warmups, a.qk_norms, a.shares)
    else:
        recipes = schedule_grid(a.lrs, a.warmups, a.qk_norms, a.drops, a.steps)
    try:
        for r in recipes:
            r.steps(a.steps)
        confirm = confirmation_seeds(range(a.seeds), a.confirm_seeds, a.confirm_start)
    except ValueError as e:
        ap.error(f"--drops: {e}" if a.drops is not None and str(e).startswith("schedule ") else str(e))
    if len({r.slug for r in recipes}) != len(recipes):
        ap.error("the grid repeats a recipe")
    a.bin = cli.checked_build(ap, a, "DROPE_BIN", ("drope-train", "drope-eval"), dest="bin").resolve()
    scratch = a.scratch or ()
    st = Study(a.out, recipes, tuple(range(a.seeds)), confirm, a.steps, a.queries, tuple(sorted(a.multipliers)),
               a.temperature, a.fit_queries, a.tolerance, a.threads, scratch,
               tuple(range(a.scratch_seeds)) if scratch else ())
    return a, st


def main(argv: list[str]) -> int:
    sys.stdout.reconfigure(line_buffering=True)
    a, st = parse(argv)
    os.chdir(ROOT)
    os.environ["OMP_NUM_THREADS"] = str(a.threads)
    d = Driver("recovery-study", a.bin, width=6, jobs=a.jobs, threads=a.threads)
    d.stage(f"recovery study in {st.out}: {len(st.recipes)} recipe(s), {len(st.seeds)} selection + "
            f"{len(st.confirm)} confirmation seed(s), budget {st.steps} steps, {a.jobs} worker(s)")
    for r in st.recipes:
        print(f"  {r.slug}: {r.describe(st.steps)}")
    try:
        run(st, d, a.poll)
    except ToolError as e:
        print(f"recovery_study: {e}", file=sys.stderr)
        return e.returncode or 1
    except (results.ResultsError, ValueError, OSError, RuntimeError) as e:
        print(f"recovery_study: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
