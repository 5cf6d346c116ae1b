"""Prose sweep (docs/results/prose-sweep.md): DroPE's in-context perplexity gap to RoPE on the quickstart's prose
model at total budgets of 400, 800, 1,600 and 3,200 steps, and at the two largest budgets the recalibration share,
learning rate and schedule. The protocol (metric, tests, the rule for cutting cells) is the page's.

A cell is (budget B, recipe). RoPE at (B, seed) is one run (configs/train/quickstart-pretrain-rope.yaml,
train.steps = B, every drop step's checkpoint kept), shared by all the cells at B. DroPE recalibrates the last
S = share · B steps from its step-(B − S) checkpoint: restarted (configs/train/quickstart-drope.yaml, run.init,
fresh AdamW and cosine, warm-up 10 % of S, recalibration lr of the recipe) or continued (the RoPE run itself with
drope.drop_at_step = B − S and QK-norm, resumed from a copy of the checkpoint: driver.seed_from_checkpoint).
Per seed: gap = 100 · (ppl_DroPE(C) / ppl_RoPE(C) − 1), held-out split, C = 256 (drope-eval ppl).

Seeds 0–2 for every cell; seeds 3 and 4 only for cells whose paired test over seeds is still inconclusive,
and (the page's extension) for both cells of a follow-up comparison whose reading is still inconclusive.
Each finished (cell, seed) appends a row to docs/results/prose-sweep.csv and rewrites the results section of
docs/results/prose-sweep.md and the plot docs/results/prose-sweep.png; rows already in the CSV are skipped, so
a fresh clone continues where the committed rows end. Run directories in runs/prose-sweep/ (--out).

  OMP_NUM_THREADS=1 nohup nice -n 19 bash studies/run.sh prose_sweep > runs/prose_sweep.log 2>&1 &
  bash studies/run.sh prose_sweep --plan        # the cells still to run and an estimated time

The sweep commits nothing: commit the CSV, the page and the plot yourself when rows have landed.
"""
from __future__ import annotations

import functools
import math
import os
import pathlib
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from drope_scripts import cli, corpus, figures, stats
from drope_scripts import study as common
from drope_scripts.driver import NONE, ROOT, Driver, Method, checkpoint, run_pipeline, seed_from_checkpoint

PRETRAIN = "configs/train/quickstart-pretrain-rope.yaml"
DROPE = "configs/train/quickstart-drope.yaml"
DATA = "runs/data/small"
C = 256
EVAL_TOKENS = 16384
BUDGETS = (400, 800, 1600, 3200)
MARGIN = 2.0  # percent: the equivalence margin of the gap
MIN_SEEDS, MAX_SEEDS = 3, 5
COLUMNS = {"cell": str, "budget": int, "recipe": str, "seed": int, "ppl_rope": float, "ppl_drope": float,
           "gap_pct": float, "commit": str, "cpu": str}
FIELDS = tuple(COLUMNS)
CSV_PATH = ROOT / "docs" / "results" / "prose-sweep.csv"
DOC_PATH = ROOT / "docs" / "results" / "prose-sweep.md"
PLOT_PATH = ROOT / "docs" / "results" / "prose-sweep.png"
SECTION = "prose-sweep"  # the page's generated section: between <!-- prose-sweep:begin --> and its end marker
BEGIN, END = f"<!-- {SECTION}:begin -->", f"<!-- {SECTION}:end -->"
# Seconds per training step of the quickstart model with one thread, and per perplexity evaluation, on the 2-core
# CPU beside a second one-thread job (about 0.19 s measured on a 2-core Xeon, with a margin; --sec-per-step
# overrides): the --plan estimate.
SEC_PER_STEP = 0.25
SEC_PER_EVAL = 5.0


@dataclass(frozen=True)
class Recipe:
    """How DroPE spends the last `share` percent of the budget: a restarted schedule at peak lr `lr`, or (lr None)
    the pretraining schedule continued."""

    name: str
    share: float
    lr: float | None
    what: str
    qk_norm: str = "qk"  # drope.qk_norm of the recalibration
    follow_up: bool = False  # added after the 12 pre-registered cells: tested on its own, outside their Holm family
    scratch: bool = False  # not a DroPE run: NoPE trained from scratch for the whole budget (share 100)

    @property
    def continued(self) -> bool:
        return self.lr is None and not self.scratch


@dataclass(frozen=True)
class Cell:
    budget: int
    recipe: Recipe

    @property
    def id(self) -> str:
        return f"b{self.budget}-{self.recipe.name}"

    @property
    def steps(self) -> int:
        """S: the recalibration steps."""
        return round(self.budget * self.recipe.share / 100)

    @property
    def drop_step(self) -> int:
        return self.budget - self.steps


def recipes(pretrain_lr: float, drope_lr: float) -> dict[str, Recipe]:
    """The quickstart's recipe and the three axes, keyed by name (the CSV's `recipe`)."""
    return {r.name: r for r in (
        Recipe("quickstart", 25, drope_lr, f"25 %, lr {drope_lr:g}, restarted"),
        Recipe("share12.5", 12.5, drope_lr, f"12.5 %, lr {drope_lr:g}, restarted"),
        Recipe("lr1x", 25, pretrain_lr, f"25 %, lr {pretrain_lr:g} (1× pretraining), restarted"),
        Recipe("lr3x", 25, 3 * pretrain_lr, f"25 %, lr {3 * pretrain_lr:g} (3× pretraining), restarted"),
        Recipe("continued", 25, None, "25 %, pretraining schedule continued"),
        Recipe("noqk", 25, drope_lr, f"25 %, lr {drope_lr:g}, restarted, no QK-norm", qk_norm="none",
               follow_up=True),
        Recipe("nope", 100, pretrain_lr, "NoPE from scratch, the whole budget (pretraining's recipe)",
               qk_norm="none", follow_up=True, scratch=True),
    )}


def make_cells(budgets: Sequence[int], rs: dict[str, Recipe], axis_budgets: int = 2) -> list[Cell]:
    """The quickstart recipe at every budget; the other recipes at the `axis_budgets` largest budgets. Budget
    ascending, then recipe in `rs` order. Every recalibration must be 1..B-1 steps."""
    budgets = sorted(set(budgets))
    if not budgets or budgets[0] < 2:
        raise ValueError(f"budgets must be integers >= 2, got {budgets}")
    big = set(budgets[-axis_budgets:]) if axis_budgets else set()
    cells = [Cell(b, r) for b in budgets for r in rs.values() if r.name == "quickstart" or b in big]
    for c in cells:
        if not 1 <= c.steps < c.budget + c.recipe.scratch:
            raise ValueError(f"{c.id}: {c.recipe.share:g} % of {c.budget} steps is {c.steps} recalibration steps")
    return cells


# --- the CSV ---------------------------------------------------------------------------------------------------


def read_rows(path: pathlib.Path) -> list[dict]:
    """The rows of the sweep's CSV (none when it does not exist), numbers parsed."""
    return common.Table(path, COLUMNS).read()


def append_row(path: pathlib.Path, row: dict) -> None:
    """Adds one row (the header first when the file is new), rewriting the file atomically."""
    common.Table(path, COLUMNS).append(row)


def make_row(cell: Cell, seed: int, ppl_rope: float, ppl_drope: float, commit: str, cpu: str) -> dict:
    return {"cell": cell.id, "budget": cell.budget, "recipe": cell.recipe.name, "seed": seed,
            "ppl_rope": round(ppl_rope, 4), "ppl_drope": round(ppl_drope, 4),
            "gap_pct": round(100 * (ppl_drope / ppl_rope - 1), 3), "commit": commit, "cpu": cpu}


# --- the tests of the protocol -----------------------------------------------------------------------------------


def _t_p(values: Sequence[float], mu: float, alternative: str) -> float:
    """The p-value of the paired t-test of the per-seed gaps (stats.one_sample_t: H1 mean gap <alternative> mu);
    nan for fewer than two values."""
    if len(values) < 2:
        return math.nan
    return stats.one_sample_t(list(values), mu, alternative).p


def verdict(gaps: Sequence[float], margin: float = MARGIN) -> dict:
    """The protocol's verdict on one cell from its per-seed gaps (percent): closed (TOST: the 90 % t interval inside
    ±margin, i.e. stats.tost_paired p < 0.05), worse / better (the 95 % t interval beyond +margin / −margin, i.e. the
    one-sided paired t-test against the margin at 0.025) or inconclusive; with the intervals and p-values."""
    gaps = list(gaps)
    n = len(gaps)
    out = {"n": n, "mean": sum(gaps) / n if n else math.nan, "ci95": (math.nan, math.nan),
           "ci90": (math.nan, math.nan), "p_tost": math.nan, "p_zero": math.nan, "verdict": "inconclusive"}
    if n < 2:
        return out
    s95, s90 = stats.summarize(gaps, 0.95), stats.summarize(gaps, 0.90)
    out["ci95"], out["ci90"] = (s95.ci_low, s95.ci_high), (s90.ci_low, s90.ci_high)
    out["p_tost"] = stats.tost_paired(gaps, [0.0] * n, margin)[0].p  # the larger of the two one-sided p
    out["p_zero"] = _t_p(gaps, 0.0, "two-sided")
    if -margin < s90.ci_low and s90.ci_high < margin:
        out["verdict"] = "closed"
    elif s95.ci_low > margin:
        out["verdict"] = "DroPE worse"
    elif s95.ci_high < -margin:
        out["verdict"] = "DroPE better"
    return out


def cell_gaps(rows: Iterable[dict], cell_id: str) -> dict[int, float]:
    """{seed: gap} of one cell."""
    return {r["seed"]: r["gap_pct"] for r in rows if r["cell"] == cell_id}


def decided(gaps: Sequence[float], min_seeds: int = MIN_SEEDS) -> bool:
    """A cell with at least min_seeds seeds whose verdict is not inconclusive gets no more seeds."""
    return len(gaps) >= min_seeds and verdict(gaps)["verdict"] != "inconclusive"


def open_follow_ups(cells: Sequence[Cell], rows: Sequence[dict], min_seeds: int = MIN_SEEDS) -> set[str]:
    """The cells of the follow-up comparisons still inconclusive after min_seeds common seeds: the follow-up cell
    and the quickstart cell of its budget (the extension of the page: both get the next seed, up to max_seeds)."""
    out: set[str] = set()
    for name in sorted({c.recipe.name for c in cells if c.recipe.follow_up}):
        for e in looks(cells, rows, name):
            o = e["final"]
            if o is not None and o["n"] >= min_seeds and o["reading"].endswith("): inconclusive"):
                out |= {o["cell"], f"b{o['budget']}-quickstart"}
    return out


def todo(cells: Sequence[Cell], rows: Sequence[dict], seed: int, min_seeds: int = MIN_SEEDS) -> list[Cell]:
    """The cells that still need `seed`: its row is missing, and the seed is one of the first min_seeds, or the cell
    is not decided on the rows it has, or it is in a follow-up comparison still inconclusive (open_follow_ups)."""
    have = {(r["cell"], r["seed"]) for r in rows}
    extend = open_follow_ups(cells, rows, min_seeds) if seed >= min_seeds else set()
    return [c for c in cells if (c.id, seed) not in have
            and (seed < min_seeds or not decided(list(cell_gaps(rows, c.id).values()), min_seeds) or c.id in extend)]


# --- the plan ----------------------------------------------------------------------------------------------------


def unit_cost(cells: Sequence[Cell], rope_needed: bool, sec_per_step: float, sec_per_eval: float) -> float:
    """Seconds for one (budget, seed): the RoPE run and its evaluation (when needed) and each DroPE cell."""
    steps = (cells[0].budget if rope_needed else 0) + sum(c.steps for c in cells)
    return steps * sec_per_step + (len(cells) + rope_needed) * sec_per_eval


def plan(cells: Sequence[Cell], rows: Sequence[dict], min_seeds: int, max_seeds: int, sec_per_step: float,
         sec_per_eval: float) -> tuple[list[tuple[int, int, list[Cell], str]], float, float]:
    """[(seed, budget, cells, 'sure' | 'if undecided')], and the estimated seconds without and with every possible
    extra seed. RoPE of (budget, seed) counts as needed when no row of that budget and seed exists."""
    units, sure, most = [], 0.0, 0.0
    have = {(r["budget"], r["seed"]) for r in rows}
    for seed in range(max_seeds):
        need = todo(cells, rows, seed, min_seeds)
        for budget in sorted({c.budget for c in need}):
            at = [c for c in need if c.budget == budget]
            cost = unit_cost(at, (budget, seed) not in have, sec_per_step, sec_per_eval)
            kind = "sure" if seed < min_seeds else "if undecided"
            units.append((seed, budget, at, kind))
            most += cost
            if kind == "sure":
                sure += cost
    return units, sure, most


def plan_text(cells: Sequence[Cell], rows: Sequence[dict], min_seeds: int, max_seeds: int, sec_per_step: float,
              sec_per_eval: float) -> str:
    units, sure, most = plan(cells, rows, min_seeds, max_seeds, sec_per_step, sec_per_eval)
    lines = [f"{len(cells)} cells; seeds 0..{min_seeds - 1} for each, up to {max_seeds} for undecided cells; "
             f"{len(rows)} rows already in the CSV", "", "| cell | S (share) | recipe | rows | verdict |",
             "|---|---:|---|---:|---|"]
    for c in cells:
        g = list(cell_gaps(rows, c.id).values())
        v = verdict(g)["verdict"] if len(g) >= 2 else "–"
        lines.append(f"| {c.id} | {c.steps} ({c.recipe.share:g} %) | {c.recipe.what} | {len(g)} | {v} |")
    lines += ["", "to run (one thread per tool; RoPE of a budget and seed is trained once for all its cells):"]
    for seed, budget, at, kind in units:
        lines.append(f"  seed {seed}, B = {budget}: {', '.join(c.id for c in at)}"
                     + ("" if kind == "sure" else "  (only if still undecided)"))
    if not units:
        lines.append("  nothing: every cell has its rows")
    lines.append(f"estimated {sure / 3600:.1f} h for the first {min_seeds} seeds, at most {most / 3600:.1f} h with "
                 f"every extra seed ({sec_per_step:g} s a step, {sec_per_eval:g} s an evaluation, one job)")
    return "\n".join(lines)


# --- the report --------------------------------------------------------------------------------------------------


def trend(rows: Sequence[dict], recipe: str = "quickstart") -> dict | None:
    """Least-squares slope of the per-seed gap against log2(budget) for one recipe: points per doubling, 95 %
    interval (None with fewer than two budgets or three rows)."""
    pts = [(math.log2(r["budget"]), r["gap_pct"]) for r in rows if r["recipe"] == recipe]
    fit = common.slope([x for x, _ in pts], [y for _, y in pts])
    if fit is None:
        return None
    return {"slope": fit["slope"], "low": fit["ci95"][0], "high": fit["ci95"][1], "n": fit["n"], "p": fit["p_two"]}


def comparisons(cells: Sequence[Cell], rows: Sequence[dict], family: str | None = None) -> list[dict]:
    """Each non-quickstart cell against the quickstart cell of its budget on their common seeds: the paired t-test
    of the gap difference, Holm-adjusted over all comparisons with at least two common seeds. The pre-registered
    recipes form one Holm family (family None); each follow-up recipe is a family of its own (family = its name)."""
    out = []
    for c in cells:
        if c.recipe.name == "quickstart" or (c.recipe.name != family if family else c.recipe.follow_up):
            continue
        mine, base = cell_gaps(rows, c.id), cell_gaps(rows, f"b{c.budget}-quickstart")
        common = sorted(set(mine) & set(base))
        diffs = [mine[s] - base[s] for s in common]
        out.append({"cell": c.id, "budget": c.budget, "recipe": c.recipe.name, "n": len(diffs),
                    "diff": sum(diffs) / len(diffs) if diffs else math.nan,
                    "p": _t_p(diffs, 0.0, "two-sided") if len(diffs) >= 2 else math.nan})
    for o, p in zip(out, stats.holm([o["p"] for o in out])):
        o["p_holm"] = p
    return out


FOLLOW_UP_MARGIN = 5.0  # points: "not the cause" when the difference's interval lies within ±this
# The follow-ups are looked at after 3, 4 and 5 seeds (the extension): each look reads its p and interval at
# Pocock's nominal level for those looks (stats.pocock_alpha), so the chance of a wrong reading over all three looks
# stays at 0.05. Looking at 0.05 each time, as the extension was first read, about doubles it.
LOOKS = tuple(range(MIN_SEEDS, MAX_SEEDS + 1))


@functools.cache
def look_alpha() -> float:
    """Pocock's nominal level of each look (computed at first use: the integration imports scipy.stats)."""
    return stats.pocock_alpha(LOOKS)


READINGS = {  # recipe: (lower gap at Holm p < 0.05, ... and the cell closed, within ±5 points, higher gap)
    "noqk": ("QK-norm explains part of the gap", "QK-norm explains the gap", "QK-norm is not the cause",
             "inconclusive"),
    "nope": ("recalibration falls short of NoPE trained from scratch", "NoPE from scratch matches RoPE",
             "DroPE is at NoPE's level: the gap is the cost of attention without positions at this scale",
             "DroPE beats NoPE from scratch"),
}


def follow_up_reading(o: dict, rows: Sequence[dict], level: float = 0.05) -> str:
    """The follow-up protocol's reading of one comparison (docs/results/prose-sweep.md, READINGS) at `level`: the
    (1 − level) interval of the difference within ±5 points (first), a lower gap at Holm p < level (and the cell
    closed, for the second reading), a higher gap at Holm p < level, else inconclusive. `o` may carry `seeds`: the
    common seeds it reads (all of them by default)."""
    what = f"{o['cell']}: {o['diff']:+.1f} points over {o['n']} seed{'s' * (o['n'] != 1)}"
    if o["n"] < 2:
        return f"{what}, inconclusive (one seed)"
    base = cell_gaps(rows, f"b{o['budget']}-quickstart")
    mine = cell_gaps(rows, o["cell"])
    seeds = o.get("seeds") or sorted(set(mine) & set(base))
    s = stats.summarize([mine[k] - base[k] for k in seeds], 1 - level)
    ci = f"{100 * (1 - level):.4g} % CI {s.ci_low:+.1f} to {s.ci_high:+.1f}, Holm p = {_p(o['p_holm'])}"
    part, whole, same, higher = READINGS[o["recipe"]]
    if max(abs(s.ci_low), abs(s.ci_high)) < FOLLOW_UP_MARGIN:  # inside the margin: too small to matter, first
        return f"{what} ({ci}): {same}"
    if o["p_holm"] < level and o["diff"] < 0:
        closed = verdict([mine[k] for k in seeds])["verdict"] == "closed"
        return f"{what} ({ci}): {whole if closed else part}"
    if o["p_holm"] < level and o["diff"] > 0:
        return f"{what} ({ci}): {higher}"
    return f"{what} ({ci}): inconclusive"


def looks(cells: Sequence[Cell], rows: Sequence[dict], family: str) -> list[dict]:
    """The follow-up family's comparisons at each look (3, 4, 5 common seeds): per look, each comparison on its
    first n common seeds (fewer when it has fewer: it stopped), Holm over the family, read at look_alpha(). Returns
    per comparison its readings by look and the first decided one (or the last look's)."""
    out = []
    by_cell: dict[str, dict] = {}
    for n in LOOKS:
        at = []
        for c in cells:
            if c.recipe.name != family:
                continue
            mine, base = cell_gaps(rows, c.id), cell_gaps(rows, f"b{c.budget}-quickstart")
            seeds = sorted(set(mine) & set(base))[:n]
            d = [mine[k] - base[k] for k in seeds]
            at.append({"cell": c.id, "budget": c.budget, "recipe": family, "n": len(d), "seeds": seeds,
                       "diff": sum(d) / len(d) if d else math.nan, "p": _t_p(d, 0.0, "two-sided"), "look": n})
        for o, p in zip(at, stats.holm([o["p"] for o in at])):
            o["p_holm"] = p
            entry = by_cell.setdefault(o["cell"], {"cell": o["cell"], "looks": [], "final": None})
            if o["n"] < n and entry["looks"]:
                continue  # no new seed at this look
            o["reading"] = follow_up_reading(o, rows, look_alpha())
            entry["looks"].append(o)
    for entry in by_cell.values():
        decided = [o for o in entry["looks"] if o["n"] >= MIN_SEEDS and not o["reading"].endswith(": inconclusive")]
        entry["final"] = decided[0] if decided else (entry["looks"][-1] if entry["looks"] else None)
        out.append(entry)
    return out


def sequential_text(e: dict) -> str:
    o = e["final"]
    if o is None:
        return f"{e['cell']}: no seed"
    state = "decided" if not o["reading"].endswith(": inconclusive") else "still inconclusive"
    return f"{o['reading']} ({state} at the look after {o['look'] if o['n'] >= o['look'] else o['n']} seeds)"


def _f(x: float, fmt: str = ".1f") -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


def _p(x: float) -> str:
    return "–" if math.isnan(x) else ("< 0.001" if x < 0.001 else f"{x:.3f}")


def results_md(cells: Sequence[Cell], rows: Sequence[dict], min_seeds: int = MIN_SEEDS,
               max_seeds: int = MAX_SEEDS) -> str:
    """The results section: one line per cell with its verdict, the trend, the recipe comparisons, a paragraph."""
    if not rows:
        return "No cell has finished yet."
    commits = sorted({r["commit"] for r in rows})
    cpus = sorted({r["cpu"] for r in rows})
    dirty = common.dirty_note([r["commit"] for r in rows])
    lines = [f"{len(rows)} rows ({sum(1 for c in cells if cell_gaps(rows, c.id))} of {len(cells)} cells started); "
             f"measured at commit {', '.join(commits)} on {'; '.join(cpus)}" + (f"; {dirty}" if dirty else "") +
             ". Per-seed numbers: [prose-sweep.csv](prose-sweep.csv); plot: [prose-sweep.png](prose-sweep.png).", "",
             "| cell | B | S (share) | recipe | seeds | ppl RoPE | ppl DroPE | gap % (95 % CI) | 90 % CI | TOST p "
             "| p (gap = 0) | verdict |",
             "|---|---:|---:|---|---:|---:|---:|---|---|---:|---:|---|"]
    verdicts = {}
    for c in cells:
        rs = sorted((r for r in rows if r["cell"] == c.id), key=lambda r: r["seed"])
        if not rs:
            lines.append(f"| {c.id} | {c.budget} | {c.steps} ({c.recipe.share:g} %) | {c.recipe.what} | 0 | | | | "
                         "| | | not started |")
            continue
        v = verdict([r["gap_pct"] for r in rs])
        state = v["verdict"] if v["n"] >= 2 else "one seed"
        if c.recipe.scratch:  # the gap of NoPE from scratch, not of a DroPE run
            state = state.replace("DroPE", "NoPE")
        if v["n"] < min_seeds:
            state += f" (running: {v['n']} of {min_seeds} seeds)"
        elif v["verdict"] != "inconclusive":
            state = f"**{state}** at {v['n']} seeds"
        elif v["n"] >= max_seeds:
            state = f"inconclusive at {v['n']} seed{'s' * (v['n'] != 1)}"
        else:
            state += f" at {v['n']} seeds (more seeds to come)"
        verdicts[c.id] = (v, state)
        rope = sum(r["ppl_rope"] for r in rs) / len(rs)
        drope = sum(r["ppl_drope"] for r in rs) / len(rs)
        lines.append(f"| {c.id} | {c.budget} | {c.steps} ({c.recipe.share:g} %) | {c.recipe.what} | {v['n']} | "
                     f"{rope:.2f} | {drope:.2f} | {v['mean']:+.1f} ({_f(v['ci95'][0], '+.1f')}, "
                     f"{_f(v['ci95'][1], '+.1f')}) | ({_f(v['ci90'][0], '+.1f')}, {_f(v['ci90'][1], '+.1f')}) | "
                     f"{_p(v['p_tost'])} | {_p(v['p_zero'])} | {state} |")
    tr = trend(rows)
    cmp = [o for o in comparisons(cells, rows) if o["n"] >= 1]
    if cmp:
        lines += ["", "Against the quickstart recipe at the same budget (paired over common seeds; Holm over the "
                  "comparisons with ≥ 2 seeds):", "", "| cell | seeds | gap − quickstart's gap (points) | p | "
                  "p Holm |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {o['cell']} | {o['n']} | {o['diff']:+.1f} | {_p(o['p'])} | {_p(o['p_holm'])} |" for o in cmp]
    for family in dict.fromkeys(c.recipe.name for c in cells if c.recipe.follow_up):
        fup = [o for o in comparisons(cells, rows, family) if o["n"] >= 1]
        if not fup:
            continue
        lines += ["", f"Follow-up `{family}` (its own protocol, below): against the quickstart recipe, paired over "
                  "common seeds, Holm over this follow-up's comparisons only:", "",
                  "| cell | seeds | gap − quickstart's gap (points) | p | p Holm |", "|---|---:|---:|---:|---:|"]
        lines += [f"| {o['cell']} | {o['n']} | {o['diff']:+.1f} | {_p(o['p'])} | {_p(o['p_holm'])} |" for o in fup]
        lines += ["", f"Follow-up `{family}` reading, sequential (looks at {', '.join(map(str, LOOKS))} seeds, each at "
                  f"Pocock's nominal level {look_alpha():.4f}, so at most 0.05 of wrong readings over the looks; the "
                  "reading is the first look's that decides): "
                  + "; ".join(sequential_text(e) for e in looks(cells, rows, family)) + "."]
        lines += ["", "Uncorrected (each look at 0.05, the extension as first read; exploratory, its false-positive "
                  "rate is about twice 0.05): " + "; ".join(follow_up_reading(o, rows) for o in fup) + "."]
    lines += ["", paragraph(cells, rows, verdicts, tr, cmp)]
    return "\n".join(lines)


def paragraph(cells: Sequence[Cell], rows: Sequence[dict], verdicts: dict, tr: dict | None, cmp: list[dict]) -> str:
    """What the finished cells show, in plain sentences, from the numbers alone."""
    out = ["**What the finished cells show.**"]
    q = [(c.budget, verdicts[c.id][0]) for c in cells if c.recipe.name == "quickstart" and c.id in verdicts]
    if q:
        out.append("At the quickstart recipe DroPE's in-context gap to RoPE is "
                   + ", ".join(f"{v['mean']:+.1f} % at {b} steps ({v['n']} seed{'s' * (v['n'] != 1)})" for b, v in q)
                   + ".")
    if tr:
        if tr["high"] < 0:
            how = "narrows with budget"
        elif tr["low"] > 0:
            how = "widens with budget"
        else:
            how = "does not change detectably with budget"
        out.append(f"Per doubling of the budget it moves by {tr['slope']:+.1f} points (95 % CI {tr['low']:+.1f} to "
                   f"{tr['high']:+.1f}, {tr['n']} runs): the gap {how}.")
    scratch = {c.id for c in cells if c.recipe.scratch}
    dec = {cid: v for cid, (v, _) in verdicts.items()
           if v["n"] >= MIN_SEEDS and v["verdict"] != "inconclusive" and cid not in scratch}
    for kind in ("closed", "DroPE better", "DroPE worse"):
        ids = [cid for cid, v in dec.items() if v["verdict"] == kind]
        if ids:
            out.append(f"{kind.capitalize() if kind == 'closed' else kind}: {', '.join(ids)}.")
    if not any(v["verdict"] == "closed" for v in dec.values()):
        out.append("No decided cell has closed the gap to within ±2 %.")
    moved = [o for o in cmp if not math.isnan(o.get("p_holm", math.nan)) and o["p_holm"] < 0.05]
    if moved:
        out.append("Recipes that change the gap against the quickstart recipe (Holm p < 0.05): "
                   + ", ".join(f"{o['cell']} ({o['diff']:+.1f} points)" for o in moved) + ".")
    elif cmp:
        out.append("No recipe changes the gap against the quickstart recipe at Holm-adjusted p < 0.05 (yet).")
    return " ".join(out)


def update_doc(doc: pathlib.Path, section: str) -> None:
    """Replaces the text between the page's markers with `section`."""
    common.update_section(doc, SECTION, section)


def plot(cells: Sequence[Cell], rows: Sequence[dict], path: pathlib.Path) -> bool:
    """Gap vs budget, one line per recipe (mean, 95 % t interval), seeds as dots, the margin shaded. False when
    matplotlib is missing or there is nothing to draw."""
    if not rows:
        return False
    plt = figures.pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.axhspan(-MARGIN, MARGIN, color="0.9", label=f"±{MARGIN:g} % (closed)")
    ax.axhline(0, color="0.6", lw=0.8)
    names = list(dict.fromkeys(c.recipe.name for c in cells))
    for k, name in enumerate(names):
        xs, ys, lo, hi = [], [], [], []
        for c in (c for c in cells if c.recipe.name == name):
            g = list(cell_gaps(rows, c.id).values())
            if not g:
                continue
            s = stats.summarize(g)
            xs.append(c.budget * (1 + 0.03 * (k - (len(names) - 1) / 2)))  # a small offset keeps the bars apart
            ys.append(s.mean)
            lo.append(s.mean - (s.ci_low if s.n > 1 else s.mean))
            hi.append((s.ci_high if s.n > 1 else s.mean) - s.mean)
            ax.scatter([xs[-1]] * len(g), g, s=10, color=f"C{k}", alpha=0.45)
        if xs:
            ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=f"C{k}",
                        label=next(c.recipe.what for c in cells if c.recipe.name == name))
    ax.set_xscale("log", base=2)
    budgets = sorted({c.budget for c in cells})
    ax.set_xticks(budgets, [str(b) for b in budgets])
    ax.set_xlabel("total budget (steps of 8 × 256 tokens)")
    ax.set_ylabel("DroPE's gap to RoPE, ppl@C (%)")
    ax.set_title("Prose: DroPE's in-context perplexity gap vs budget (mean, 95 % t interval, seeds)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save_png(fig, path)
    return True


# --- running ------------------------------------------------------------------------------------------------------



class Runs:
    """The real runs: drope-train and drope-eval through the Driver, under out/."""

    def __init__(self, d: Driver, out: pathlib.Path, cells: Sequence[Cell]):
        self.d, self.out, self.cells = d, out, cells
        (out / "eval").mkdir(parents=True, exist_ok=True)
        (out / "train").mkdir(parents=True, exist_ok=True)

    def rope_dir(self, budget: int, seed: int) -> pathlib.Path:
        return self.out / "train" / f"rope-b{budget}-s{seed}"

    def _ppl(self, model: pathlib.Path, name: str) -> float:
        doc, _ = self.d.evaluate("ppl", Method(name, model), self.out / "eval" / name,
                                 ("--tokenizer", DATA, "--data", DATA, "--lengths", C, "--max-tokens", EVAL_TOKENS),
                                 "ppl")
        return float(doc["summary"][f"ppl@{C}"])

    def _rope_overrides(self, budget: int, seed: int) -> list[str]:
        drops = [c.drop_step for c in self.cells if c.budget == budget and not c.recipe.scratch]
        every = math.gcd(budget, *drops)
        return [f"run.seed={seed}", f"train.steps={budget}", f"train.checkpoint_every={every}",
                f"train.keep_last={budget // every + 1}", f"train.log_every={max(1, budget // 8)}",
                f"train.eval_every={max(1, budget // 4)}"]

    def rope(self, budget: int, seed: int) -> float:
        run_dir = self.rope_dir(budget, seed)
        self.d.train(PRETRAIN, run_dir, budget, [f"run.name=prose-sweep-rope-b{budget}-s{seed}",
                                                 *self._rope_overrides(budget, seed)], show=NONE)
        return self._ppl(checkpoint(run_dir, budget), run_dir.name)

    def drope(self, cell: Cell, seed: int) -> float:
        src = checkpoint(self.rope_dir(cell.budget, seed), cell.drop_step)
        dst = self.out / "train" / f"drope-{cell.id}-s{seed}"
        r = cell.recipe
        if r.scratch:  # NoPE of the same seed and data order as RoPE, trained from scratch for the whole budget
            dst = self.out / "train" / f"{cell.id}-s{seed}"
            b = cell.budget
            self.d.train(PRETRAIN, dst, b, [f"run.name=prose-sweep-{cell.id}-s{seed}", f"run.seed={seed}",
                                            f"train.steps={b}", "model.positional.type=nope",
                                            f"train.log_every={max(1, b // 8)}", f"train.eval_every={max(1, b // 4)}",
                                            f"train.checkpoint_every={max(1, b // 4)}", "train.keep_last=1"],
                         show=NONE)
            return self._ppl(checkpoint(dst, b), dst.name)
        if r.continued:
            seed_from_checkpoint(src, dst)  # drope-train --resume continues it (a fresh run repeats RoPE's steps)
            self.d.train(PRETRAIN, dst, cell.budget,
                         [f"run.name=prose-sweep-{cell.id}-s{seed}",
                          *(o for o in self._rope_overrides(cell.budget, seed) if not o.startswith("train.keep_last")),
                          "train.keep_last=1", f"drope.drop_at_step={cell.drop_step}", f"drope.qk_norm={r.qk_norm}"],
                         show=NONE)
            model = checkpoint(dst, cell.budget)
        else:
            s = cell.steps
            self.d.train(DROPE, dst, s,
                         [f"run.name=prose-sweep-{cell.id}-s{seed}", f"run.seed={seed + 1}", f"train.steps={s}",
                          f"optim.lr={r.lr:g}", f"schedule.warmup={max(1, s // 10)}",
                          f"train.log_every={max(1, s // 4)}", f"train.checkpoint_every={max(1, s // 4)}",
                          "train.keep_last=1", f"drope.qk_norm={r.qk_norm}"],
                         [f"run.init={src}"], show=NONE)
            model = checkpoint(dst, s)
        return self._ppl(model, dst.name)



class Sweep:
    """The sweep's bookkeeping: which (cell, seed) to run, the rows, the doc and plot after each row."""

    def __init__(self, d: Driver, runs, cells: Sequence[Cell], csv_path: pathlib.Path, doc: pathlib.Path | None,
                 plot_path: pathlib.Path | None, min_seeds: int, max_seeds: int, commit: str, cpu: str,
                 on_row: Callable[[dict], None] | None = None):
        self.d, self.runs, self.cells, self.csv = d, runs, list(cells), csv_path
        self.doc, self.plot_path, self.min_seeds, self.max_seeds = doc, plot_path, min_seeds, max_seeds
        self.commit, self.cpu, self.on_row = commit, cpu, on_row
        self.lock = threading.Lock()
        self.retry_wait = 60.0

    def refresh(self) -> None:
        rows = read_rows(self.csv)
        if self.doc is not None:
            update_doc(self.doc, results_md(self.cells, rows, self.min_seeds, self.max_seeds))
        if self.plot_path is not None:
            plot(self.cells, rows, self.plot_path)

    def unit(self, budget: int, seed: int, cells: Sequence[Cell]) -> None:
        """RoPE at (budget, seed) and each DroPE cell of it; a row per cell as it lands."""
        landed = {(r["cell"], r["seed"]) for r in read_rows(self.csv)}
        cells = [c for c in cells if (c.id, seed) not in landed]  # (a retry after a failure)
        if not cells:
            return
        ppl_rope = self.runs.rope(budget, seed)
        for cell in cells:
            ppl_drope = self.runs.drope(cell, seed)
            row = make_row(cell, seed, ppl_rope, ppl_drope, self.commit, self.cpu)
            with self.lock:
                if (cell.id, seed) in {(r["cell"], r["seed"]) for r in read_rows(self.csv)}:
                    continue  # another process landed it meanwhile
                append_row(self.csv, row)
                self.refresh()
                self.d.say(f"{cell.id} seed {seed}: RoPE {ppl_rope:.2f}, DroPE {ppl_drope:.2f}, gap "
                           f"{row['gap_pct']:+.1f} %")
                if self.on_row:
                    self.on_row(row)

    def run(self) -> int:
        """Every seed round in turn: the first min_seeds for all cells, later ones for undecided cells only."""
        ran = 0
        for seed in range(self.max_seeds):
            need = todo(self.cells, read_rows(self.csv), seed, self.min_seeds)
            if not need:
                continue
            budgets = sorted({c.budget for c in need})
            self.d.stage(f"seed {seed}: " + "; ".join(
                f"B = {b}: " + ", ".join(c.recipe.name for c in need if c.budget == b) for b in budgets))
            common.retrying(lambda seed=seed, need=need, budgets=budgets: self.d.parallel(
                [(f"b{b} s{seed}", functools.partial(self.unit, b, seed, [c for c in need if c.budget == b]))
                 for b in budgets]), self.d.say, wait=self.retry_wait)
            ran += len(need)
        return ran



def study(argv: list[str]) -> int:
    ap = cli.Parser("prose_sweep", prog="studies/run.sh prose_sweep", description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", action="store_true", help="print the cells still to run and an estimated time, then stop")
    ap.add_argument("--budgets", type=cli.int_list_type(1), default=BUDGETS, help="total budgets in steps")
    ap.add_argument("--min-seeds", type=cli.int_type(), default=MIN_SEEDS, help="seeds every cell gets (default 3)")
    ap.add_argument("--max-seeds", type=cli.int_type(), default=MAX_SEEDS,
                    help="seeds an undecided cell gets (default 5)")
    ap.add_argument("--jobs", type=cli.int_type(), default=1, help="(budget, seed) units side by side: 1 or 2")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/prose-sweep"), help="run directories")
    ap.add_argument("--csv", type=pathlib.Path, default=CSV_PATH, help="the rows (default docs/results/...)")
    ap.add_argument("--doc", type=pathlib.Path, default=DOC_PATH, help="the page whose results section is rewritten")
    ap.add_argument("--plot", type=pathlib.Path, default=PLOT_PATH, help="the plot")
    cli.add_build_option(ap, "DROPE_BUILD_DIR")
    ap.add_argument("--sec-per-step", type=cli.float_type(0, lo_open=True), default=SEC_PER_STEP,
                    help="for --plan's estimate, > 0")
    ap.add_argument("--sec-per-eval", type=cli.float_type(0), default=SEC_PER_EVAL, help="for --plan's estimate, >= 0")
    a = ap.parse_args(argv)
    out = ap.check(cli.out_dir, cli.caller_path(a.out), "--out")
    csv_path = ap.check(cli.out_file, cli.caller_path(a.csv), "--csv")
    doc = ap.check(cli.in_file, cli.caller_path(a.doc), "--doc")
    plot_path = ap.check(cli.out_file, cli.caller_path(a.plot), "--plot")
    budgets = list(a.budgets)
    if not 1 <= a.min_seeds <= a.max_seeds <= 100:
        ap.error(f"need 1 <= --min-seeds <= --max-seeds <= 100, got {a.min_seeds}, {a.max_seeds}")
    if not 1 <= a.jobs <= 2:
        ap.error(f"--jobs must be 1 or 2 (a shared 2-core machine), got {a.jobs}")
    if a.sec_per_step <= 0 or a.sec_per_eval < 0:
        ap.error("--sec-per-step must be > 0, --sec-per-eval >= 0")
    try:
        cells = make_cells(budgets, recipes(config_float(ROOT / PRETRAIN, "optim", "lr"),
                                            config_float(ROOT / DROPE, "optim", "lr")))
    except ValueError as e:
        ap.error(str(e))
    bin_dir, bin_what = cli.build_dir(a, "DROPE_BUILD_DIR")
    if a.build is not None:
        ap.check(cli.in_dir, bin_dir, bin_what)
    ap.check(corpus.knobs, "small")
    rows = read_rows(csv_path)
    if a.plan:
        print(plan_text(cells, rows, a.min_seeds, a.max_seeds, a.sec_per_step, a.sec_per_eval))
        return 0
    bin_dir = cli.checked_build(ap, a, "DROPE_BUILD_DIR", ("drope-train", "drope-eval", "drope-data"))
    os.chdir(ROOT)  # the configs and the corpus are named from the root
    d = Driver("prose-sweep", bin_dir, width=6, jobs=a.jobs)
    d.stage("corpus: Jane Austen (r-cran-janeaustenr), SentencePiece BPE vocab 2048, token shards")
    rc = corpus.main(["--small"])
    if rc:
        return rc
    print(plan_text(cells, rows, a.min_seeds, a.max_seeds, a.sec_per_step, a.sec_per_eval))
    sweep = Sweep(d, Runs(d, out, cells), cells, csv_path, doc, plot_path, a.min_seeds, a.max_seeds,
                  common.commit_stamp(), common.cpu_name())
    sweep.run()
    rows = read_rows(csv_path)
    d.stage(f"done in {d.elapsed()} s: {len(rows)} rows in {csv_path} (commit it and {doc.name} yourself)")
    print(results_md(cells, rows, a.min_seeds, a.max_seeds))
    return 0


def config_float(path: str | pathlib.Path, section: str, key: str) -> float:
    """section.key of a drope-train YAML config: a positive number."""
    import yaml

    with open(path, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    v = doc.get(section, {}).get(key) if isinstance(doc, dict) else None
    if not isinstance(v, (int, float)) or isinstance(v, bool) or not v > 0:
        raise ValueError(f"{path}: {section}.{key} must be a positive number, got {v!r}")
    return float(v)


def main(argv: list[str]) -> int:
    return run_pipeline("prose_sweep", lambda: study(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
