"""The machinery of the offset-key recovery studies (studies/recovery_study.py, studies/recovery_budgets.py):
recalibration recipes and schedules, a study directory's settings, the tasks that train and score its runs, the
per-seed results read back from them and their summaries over seeds."""
from __future__ import annotations

import json
import math
import pathlib
from collections.abc import Sequence
from dataclasses import dataclass

from . import results
from .driver import NONE, ROOT, Driver, Method, Task, checkpoint, config_int, config_steps, train_state
from .offset_key import DROPE_CONFIG, ROPE_CONFIG, context
from .offset_key_report import KIND, Cell, cell
from .stats import wilson

HELDOUT, TEST = "heldout", "test"
# Trained from scratch for the budget T beside RoPE (--scratch): the RoPE config with model.positional changed.
SCRATCH = {"alibi": "configs/train/offset-key-alibi.yaml", "rnope-swa": "configs/train/offset-key-rnope-swa.yaml"}
SCRATCH_LABELS = {"alibi": "ALiBi", "rnope-swa": "RNoPE-SWA"}
TOLERANCE = 2.0  # points: "within 2 points of RoPE"


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


def schedule(lr: float, warmup: float, qk_norm: str, drop: int, steps: int, total: int) -> Recipe:
    """DroPE from the RoPE run's step `drop` for `steps` steps. On the budget T (drop + steps = total) it is the
    share recipe of the same steps (same slug: the runs are shared); off it, a recipe of its own budget."""
    if drop + steps == total:
        equal = Recipe(lr, warmup, qk_norm, 100 * steps / total)
        if 1 <= steps < total and equal.steps(total) == steps:
            return equal
    return Recipe(lr, warmup, qk_norm, 100 * steps / (drop + steps), drop, steps)



# ---- per-seed results ---------------------------------------------------------------------------------------

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


# ---- summaries -----------------------------------------------------------------------------------------------

def cell_text(d: dict | None) -> str:
    """A summary cell (offset_key_report.cell) as the report prints it; – for none."""
    return "–" if d is None else Cell.of(d).text()


def rate_text(s: dict) -> str:
    """The recovery rate of a recipe_summary with its Wilson interval: '3/5 = 60 % [23, 88]'."""
    lo, hi = 100 * s["wilson_low"], 100 * s["wilson_high"]
    return f"{s['recovered']}/{s['n']} = {100 * s['rate']:.0f} % [{lo:.0f}, {hi:.0f}]"


def seed_doc(r: SeedResult, phase: str, tolerance: float) -> dict:
    return {"phase": phase, "split": r.split, "recipe": r.recipe, "seed": r.seed, "rope_acc": r.rope_acc,
            "drope_acc": r.drope_acc, "recovered": r.recovered(tolerance), "temperature": r.temperature,
            "far": {str(m): v for m, v in r.far.items()}}
