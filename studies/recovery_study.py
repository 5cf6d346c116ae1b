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
import os
import pathlib
import sys
from collections.abc import Sequence

from drope_scripts import cli, results
from drope_scripts.atomic import write_atomic
from drope_scripts.driver import (
    ROOT,
    Driver,
    ToolError,
    config_steps,
)
from drope_scripts.offset_key import ROPE_CONFIG, TEMPERATURE_QUERIES, context, dump
from drope_scripts.recovery import (
    HELDOUT,
    SCRATCH,
    SCRATCH_LABELS,
    TEST,
    TOLERANCE,
    Recipe,
    Runner,
    SeedResult,
    Study,
    cell_text,
    rate_text,
    recipe_summary,
    schedule,
    seed_doc,
)

STUDY_KIND = "offset-key-recovery-study"
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

def grid(lrs: Sequence[float], warmups: Sequence[float], qk_norms: Sequence[str],
         shares: Sequence[float]) -> tuple[Recipe, ...]:
    """Every combination, in this order: share, QK-norm, learning rate, warm-up (the order breaks last ties)."""
    return tuple(Recipe(lr, w, q, s) for s, q, lr, w in itertools.product(shares, qk_norms, lrs, warmups))


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


# ---- the report ----------------------------------------------------------------------------------------------

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
                     f"{r.qk_norm} | {r.schedule_text(T)} | {rate_text(e)} | {cell_text(e['rope_accuracy'])} | "
                     f"{cell_text(e['accuracy'])} | " + " | ".join(cell_text(e["far"][str(m)]) for m in far_ms) + " |")
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
                  f"| {rate_text(conf)} | {cell_text(conf['rope_accuracy'])} | {cell_text(conf['accuracy'])} | " +
                  " | ".join(cell_text(conf["far"][str(m)]) for m in far_ms) + " |", "",
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
        lines.append(f"| {SCRATCH_LABELS[name]} | `{sc['configs'][name]}` | {rate_text(s)} | "
                     f"{cell_text(s['rope_accuracy'])} | {cell_text(s['accuracy'])} | "
                     + " | ".join(cell_text(s["far"][str(m)]) for m in far_ms) + " |")
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
