"""Width study (docs/width-study.md): does DroPE's in-context perplexity gap to RoPE on prose shrink with the model's
width? Widths 128, 256 and 384 at depth 4, budgets 400 and 1,600 steps on the full Debian corpus (under one epoch),
seeds 0-3; arms rope, nope (from scratch), drope-quickstart and drope-lr1x (the last quarter of the budget from the
rope run's checkpoint). The protocol, its tests and its verdict rules are the page's; n is fixed.

Each finished run appends a row to docs/results/width-study.csv and rewrites the page's results section and
docs/results/width-study.png; rows already in the CSV are skipped, so a fresh clone continues where the committed
rows end. The tools run from a copy made at a clean commit (runs/width-study/bin/<commit>/). The study never
commits: that is the user's step.

  OMP_NUM_THREADS=1 nohup nice -n 19 bash studies/run.sh width_study > runs/width_study.log 2>&1 &
  bash studies/run.sh width_study --plan          # what is left and an estimated time
  bash studies/run.sh width_study --report        # the results section and the plot from the CSV alone
"""
from __future__ import annotations

import math
import os
import pathlib
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from drope_scripts import cli, corpus, figures, stats
from drope_scripts import study as common
from drope_scripts.driver import NONE, ROOT, Driver, Method, checkpoint, claim, locked, run_pipeline

PRETRAIN = "configs/train/quickstart-pretrain-rope.yaml"
DROPE = "configs/train/quickstart-drope.yaml"
DATA = "runs/data/full"
VOCAB = 4096
C = 256
EVAL_LENGTHS = (C, 4 * C)
EVAL_TOKENS = 32768
WIDTHS = (128, 256, 384)
BUDGETS = (400, 1600)
SEEDS = (0, 1, 2, 3)
HEAD_DIM = 32
PRETRAIN_LR = 3e-3
DROP_SHARE = 0.25
MARGIN = 5.0  # points of gap per doubling of the width: the equivalence margin of the slope
ALPHA = 0.05
PRIMARY_BUDGET = 1600
TOOLS = ("drope-train", "drope-eval", "drope-data")
# The modules the tools dlopen from beside themselves (the tokenizer and Parquet readers): copied with them.
MODULES = ("libdrope_sentencepiece.so", "libdrope_parquet.so")
CSV_PATH = ROOT / "docs" / "results" / "width-study.csv"
DOC_PATH = ROOT / "docs" / "width-study.md"
PLOT_PATH = ROOT / "docs" / "results" / "width-study.png"
SECTION = "width-study"
FIELDS = {"width": int, "budget": int, "seed": int, "arm": str, "ppl_c": float, "ppl_4c": float, "ppl_rope": float,
          "gap_pct": float, "seconds": float, "commit": str, "cpu": str}
# Seconds per training step with one thread at each width (the estimate of the page's protocol; --plan only).
SEC_PER_STEP = {128: 0.2, 256: 0.55, 384: 1.2}
SEC_PER_EVAL = 10.0


@dataclass(frozen=True)
class Arm:
    name: str
    what: str
    lr: float | None = None  # the recalibration learning rate of a DroPE arm
    scratch: bool = False  # nope: trained from scratch for the whole budget

    @property
    def drope(self) -> bool:
        return self.lr is not None


ARMS = (
    Arm("rope", "RoPE, the whole budget"),
    Arm("nope", "NoPE from scratch, the whole budget", scratch=True),
    Arm("drope-quickstart", "DroPE, last 25 % at lr 1e-3 (the quickstart recipe)", lr=1e-3),
    Arm("drope-lr1x", "DroPE, last 25 % at lr 3e-3 (pretraining's)", lr=PRETRAIN_LR),
)
ARM = {a.name: a for a in ARMS}


def units() -> list[tuple[int, int, int]]:
    """(seed, width, budget) in the protocol's order: seed by seed, width ascending, budget ascending."""
    return [(s, w, b) for s in SEEDS for w in WIDTHS for b in BUDGETS]


def unit_seconds(w: int, b: int) -> float:
    """The protocol's estimate of one unit's time with one thread: rope and nope for the whole budget, two DroPE
    arms for its last quarter, and five evaluations."""
    return (2 * b + 2 * recal_steps(b)) * SEC_PER_STEP[w] + len(ARMS) * SEC_PER_EVAL


def run_order() -> list[tuple[int, int, int]]:
    """The units cheapest first (then in the protocol's order), so that a session finishes as many whole units as
    it can: a unit's runs live in runs/, which a fresh clone does not have, so an unfinished unit starts again.
    The order enters no test: every registered row is run before any verdict."""
    return sorted(units(), key=lambda u: (unit_seconds(u[1], u[2]), units().index(u)))


def registered() -> list[tuple[int, int, int, str]]:
    """Every registered row (width, budget, seed, arm), in run order."""
    return [(w, b, s, a.name) for s, w, b in units() for a in ARMS]


def model_overrides(width: int) -> list[str]:
    if width % (2 * HEAD_DIM):
        raise ValueError(f"width {width} is not a multiple of {2 * HEAD_DIM}")
    heads = width // HEAD_DIM
    return [f"model.vocab_size={VOCAB}", f"model.hidden_size={width}", f"model.intermediate_size={3 * width}",
            f"model.num_heads={heads}", f"model.num_kv_heads={heads // 2}", f"model.head_dim={HEAD_DIM}"]


def drop_step(budget: int) -> int:
    return budget - recal_steps(budget)


def recal_steps(budget: int) -> int:
    return round(budget * DROP_SHARE)


def parameters(width: int, vocab: int = VOCAB, layers: int = 4) -> int:
    """Parameter count of the study's model at `width` (tied embeddings, GQA 2:1, SwiGLU 3×, RMSNorm weights)."""
    attn = width * width + 2 * width * (width // 2) + width * width
    mlp = 3 * width * 3 * width
    return layers * (attn + mlp + 2 * width) + vocab * width + width


# --- the rows and the tests --------------------------------------------------------------------------------------


def table(path: pathlib.Path = CSV_PATH) -> common.Table:
    return common.Table(path, FIELDS)


def gaps(rows: Sequence[dict], arm: str, budget: int) -> dict[tuple[int, int], float]:
    """(width, seed) → gap of `arm` at `budget`."""
    return {(r["width"], r["seed"]): r["gap_pct"] for r in rows if r["arm"] == arm and r["budget"] == budget}


def width_fit(rows: Sequence[dict], arm: str, budget: int) -> dict | None:
    g = gaps(rows, arm, budget)
    keys = sorted(g)
    return common.slope([math.log2(w) for w, _ in keys], [g[k] for k in keys])


def per_seed_slopes(rows: Sequence[dict], arm: str, budget: int) -> list[float]:
    """The slope of each seed that has every width (the robustness check: runs of one seed share a data order)."""
    g = gaps(rows, arm, budget)
    out = []
    for s in SEEDS:
        if all((w, s) in g for w in WIDTHS):
            fit = common.slope([math.log2(w) for w in WIDTHS], [g[(w, s)] for w in WIDTHS])
            if fit is not None:
                out.append(fit["slope"])
    return out


def complete(rows: Sequence[dict]) -> bool:
    have = {(r["width"], r["budget"], r["seed"], r["arm"]) for r in rows}
    return all(k in have for k in registered())


def primary(rows: Sequence[dict]) -> dict:
    """The primary test: the width slope of drope-quickstart's gap at the primary budget and its verdict."""
    fit = width_fit(rows, "drope-quickstart", PRIMARY_BUDGET)
    return {"fit": fit, "verdict": common.slope_verdict(fit, MARGIN, ALPHA)}


def secondary(rows: Sequence[dict]) -> list[dict]:
    """The six secondary tests, Holm-adjusted as one family: DroPE against NoPE at each width (paired t over
    seeds), then the width slopes of nope, drope-lr1x (primary budget) and drope-quickstart (the other budget)."""
    out = []
    q, n = gaps(rows, "drope-quickstart", PRIMARY_BUDGET), gaps(rows, "nope", PRIMARY_BUDGET)
    for w in WIDTHS:
        common_seeds = [s for s in SEEDS if (w, s) in q and (w, s) in n]
        d = [q[(w, s)] - n[(w, s)] for s in common_seeds]
        o = {"test": f"drope-quickstart − nope, width {w}", "n": len(d), "estimate": sum(d) / len(d) if d else math.nan,
             "p": stats.one_sample_t(d, 0.0).p if len(d) >= 2 else math.nan, "kind": "difference"}
        if len(d) >= 2:
            s = stats.summarize(d)
            o["ci95"] = (s.ci_low, s.ci_high)
        out.append(o)
    other = min(b for b in BUDGETS if b != PRIMARY_BUDGET)
    for arm, b in (("nope", PRIMARY_BUDGET), ("drope-lr1x", PRIMARY_BUDGET), ("drope-quickstart", other)):
        fit = width_fit(rows, arm, b)
        out.append({"test": f"width slope of {arm}'s gap at {b} steps", "n": fit["n"] if fit else 0,
                    "estimate": fit["slope"] if fit else math.nan, "p": fit["p_two"] if fit else math.nan,
                    "ci95": fit["ci95"] if fit else (math.nan, math.nan), "kind": "slope"})
    for o, p in zip(out, stats.holm([o["p"] for o in out])):
        o["p_holm"] = p
        if math.isnan(p) or p >= ALPHA:
            o["reading"] = "inconclusive"
        elif o["kind"] == "difference":
            o["reading"] = ("recalibration falls short of NoPE" if o["estimate"] > 0
                            else "DroPE beats NoPE from scratch")
        else:
            o["reading"] = "shrinks with width" if o["estimate"] < 0 else "grows with width"
    return out


# --- the page ----------------------------------------------------------------------------------------------------


def _p(p: float) -> str:
    return "–" if math.isnan(p) else stats.fmt_p(p)


def _ci(ci: tuple[float, float]) -> str:
    return "–" if any(math.isnan(x) for x in ci) else f"{ci[0]:+.1f} to {ci[1]:+.1f}"


PRIMARY_WORDS = {"shrinks": "**shrinks with width**", "grows": "**grows with width**",
                 "flat": f"**flat** (within ±{MARGIN:g} points per doubling)", "inconclusive": "**inconclusive**"}


def results_md(rows: Sequence[dict]) -> str:
    """The results section: progress while the record is incomplete; the registered tests once it is complete."""
    done = {(r["width"], r["budget"], r["seed"], r["arm"]) for r in rows}
    total = len(registered())
    commits = ", ".join(dict.fromkeys(r["commit"] for r in rows)) or "–"
    cpus = "; ".join(dict.fromkeys(r["cpu"] for r in rows)) or "–"
    hours = sum(r["seconds"] for r in rows) / 3600
    left = time_left(rows) if len(done) < total else ""
    lines = [f"{len(done)} of {total} registered rows; commits {commits}; CPU {cpus}; {hours:.1f} h of training and "
             "evaluation so far" + (f"; {left}" if left else "") +
             ". Per-run numbers: [results/width-study.csv](results/width-study.csv).", ""]
    lines += ["| width | budget | arm | seeds | ppl@C | ppl@4C | gap % (mean, 95 % CI) |",
              "|---:|---:|---|---:|---:|---:|---|"]
    for w in WIDTHS:
        for b in BUDGETS:
            for a in ARMS:
                rs = [r for r in rows if r["width"] == w and r["budget"] == b and r["arm"] == a.name]
                if not rs:
                    continue
                g = [r["gap_pct"] for r in rs]
                gap = "–" if a.name == "rope" else (f"{g[0]:+.1f}" if len(g) == 1 else
                                                    f"{stats.summarize(g).mean:+.1f} ({_ci(_t_ci(g))})")
                lines.append(f"| {w} | {b} | {a.name} | {len(rs)} | {sum(r['ppl_c'] for r in rs) / len(rs):.2f} | "
                             f"{sum(r['ppl_4c'] for r in rs) / len(rs):.1f} | {gap} |")
    if not complete(rows):
        lines += ["", f"The record is incomplete ({len(done)} of {total} rows): under the protocol no test is run and "
                  "no verdict is given until every registered row is in."]
        return "\n".join(lines)
    pr = primary(rows)
    fit = pr["fit"]
    seeds = per_seed_slopes(rows, "drope-quickstart", PRIMARY_BUDGET)
    ss = stats.summarize(seeds) if len(seeds) >= 2 else None
    verdict = " and ".join(PRIMARY_WORDS[v] for v in pr["verdict"])
    lines += ["", f"**Primary test** (OLS of drope-quickstart's gap at {PRIMARY_BUDGET} steps on log2(width), "
              f"{fit['n']} runs, df = {fit['df']}): slope {fit['slope']:+.2f} points per doubling, 95 % CI "
              f"{_ci(fit['ci95'])}, 90 % CI {_ci(fit['ci90'])}; one-sided p (slope < 0) = {_p(fit['p_less'])}, "
              f"(slope > 0) = {_p(fit['p_greater'])}. Verdict: the gap {verdict}."]
    if ss is not None:
        lines.append(f"Robustness (no verdict): the mean of the {ss.n} per-seed slopes is {ss.mean:+.2f} points per "
                     f"doubling, 95 % CI {ss.ci_low:+.2f} to {ss.ci_high:+.2f}.")
    lines += ["", "**Secondary tests** (one family, Holm-adjusted, α = 0.05, two-sided):", "",
              "| test | n | estimate (points) | 95 % CI | p | p Holm | reading |", "|---|---:|---:|---|---:|---:|---|"]
    for o in secondary(rows):
        lines.append(f"| {o['test']} | {o['n']} | {o['estimate']:+.1f} | {_ci(o.get('ci95', (math.nan,) * 2))} | "
                     f"{_p(o['p'])} | {_p(o['p_holm'])} | {o['reading']} |")
    return "\n".join(lines)


def _t_ci(values: Sequence[float]) -> tuple[float, float]:
    s = stats.summarize(list(values))
    return (s.ci_low, s.ci_high)


def plot(rows: Sequence[dict], path: pathlib.Path) -> bool:
    """The gap against width, one line per (non-RoPE arm, budget): mean and 95 % t interval, seeds as dots."""
    if not rows:
        return False
    plt = figures.pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.axhline(0, color="0.6", lw=0.8)
    k = 0
    for a in ARMS[1:]:
        for b in BUDGETS:
            g = gaps(rows, a.name, b)
            xs, ys, lo, hi = [], [], [], []
            for w in WIDTHS:
                v = [g[(w, s)] for s in SEEDS if (w, s) in g]
                if not v:
                    continue
                x = w * (1 + 0.025 * (k - 2.5))
                m = sum(v) / len(v)
                low, high = _t_ci(v) if len(v) > 1 else (m, m)
                xs.append(x), ys.append(m), lo.append(m - low), hi.append(high - m)
                ax.scatter([x] * len(v), v, s=9, color=f"C{k}", alpha=0.4)
            if xs:
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, color=f"C{k}",
                            ls="-" if b == PRIMARY_BUDGET else "--", label=f"{a.name}, {b} steps")
            k += 1
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(WIDTHS), [str(w) for w in WIDTHS])
    ax.set_xlabel("width (hidden size; 4 layers)")
    ax.set_ylabel("gap to RoPE, ppl@C (%)")
    ax.set_title("Prose, full Debian corpus: gap to RoPE vs width (mean, 95 % t interval, seeds)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    figures.save_png(fig, path)
    return True


def report(tab: common.Table, doc: pathlib.Path | None, plot_path: pathlib.Path | None) -> str:
    rows = tab.read()
    section = results_md(rows)
    if doc is not None:
        common.update_section(doc, SECTION, section)
    if plot_path is not None:
        plot(rows, plot_path)
    return section


def measured_sec_per_step(rows: Sequence[dict]) -> dict[int, float]:
    """Each width's median seconds per training step over the rows in (a row's seconds cover its run and its
    evaluations, measured as the study runs: one thread, beside the other worker)."""
    per: dict[int, list[float]] = {}
    for r in rows:
        if r["arm"] not in ARM or not r["seconds"] > 0:
            continue
        steps = recal_steps(r["budget"]) if ARM[r["arm"]].drope else r["budget"]
        if steps > 0:
            per.setdefault(r["width"], []).append(r["seconds"] / steps)
    return {w: statistics.median(v) for w, v in per.items()}


def time_left(rows: Sequence[dict]) -> str:
    """The runs left and their time: the protocol's estimate, and (with rows in) the rates those rows measured."""
    have = {(r["width"], r["budget"], r["seed"], r["arm"]) for r in rows}
    todo = [k for k in registered() if k not in have]
    measured = measured_sec_per_step(rows)
    sec = sec_measured = 0.0
    for w, b, _, arm in todo:
        steps = recal_steps(b) if ARM[arm].drope else b
        sec += steps * SEC_PER_STEP[w] + SEC_PER_EVAL
        sec_measured += steps * measured.get(w, SEC_PER_STEP[w]) + (0 if w in measured else SEC_PER_EVAL)
    text = f"{len(todo)} runs to do, about {sec / 3600:.1f} h with one thread (the protocol's estimate)"
    if measured and todo:
        rates = ", ".join(f"{measured[w]:.2f} s at width {w}" for w in sorted(measured))
        text += (f"; about {sec_measured / 3600:.1f} h at the rates the rows in measured (median a step: {rates}"
                 + ("" if all(w in measured for w, *_ in todo) else "; the protocol's rate elsewhere") + ")")
    return text


def plan_text(rows: Sequence[dict]) -> str:
    have = {(r["width"], r["budget"], r["seed"], r["arm"]) for r in rows}
    return f"width study: {len(have)} of {len(registered())} rows in; {time_left(rows)}"


# --- running -----------------------------------------------------------------------------------------------------


class Runs:
    """The real runs: drope-train and drope-eval (from the snapshot of a clean commit) under out/."""

    def __init__(self, d: Driver, out: pathlib.Path):
        self.d, self.out = d, out
        for sub in ("train", "eval"):
            (out / sub).mkdir(parents=True, exist_ok=True)

    def run_dir(self, w: int, b: int, s: int, arm: str) -> pathlib.Path:
        return self.out / "train" / f"w{w}-b{b}-s{s}-{arm}"

    def ppl(self, model: pathlib.Path, name: str) -> tuple[float, float]:
        doc, _ = self.d.evaluate("ppl", Method(name, model), self.out / "eval" / name,
                                 ("--tokenizer", DATA, "--data", DATA, "--lengths", ",".join(map(str, EVAL_LENGTHS)),
                                  "--max-tokens", EVAL_TOKENS), "ppl")
        return tuple(float(doc["summary"][f"ppl@{n}"]) for n in EVAL_LENGTHS)

    def train(self, w: int, b: int, s: int, arm: Arm) -> pathlib.Path:
        dst = self.run_dir(w, b, s, arm.name)
        common_sets = [f"run.name=width-study-w{w}-b{b}-s{s}-{arm.name}", f"data.dataset={DATA}"]
        if not arm.drope:
            # rope keeps every checkpoint (the DroPE arms start from the one at the drop step); nope its last
            every = math.gcd(b, drop_step(b)) if arm.name == "rope" else max(1, b // 4)
            sets = [*common_sets, *model_overrides(w), f"run.seed={s}", f"train.steps={b}",
                    f"optim.lr={PRETRAIN_LR:g}", f"train.checkpoint_every={every}",
                    f"train.keep_last={b // every + 1 if arm.name == 'rope' else 1}",
                    f"train.log_every={max(1, b // 8)}", "train.eval_every=0"]
            if arm.scratch:
                sets.append("model.positional.type=nope")
            self.d.train(PRETRAIN, dst, b, sets, show=NONE)
            return checkpoint(dst, b)
        src = checkpoint(self.run_dir(w, b, s, "rope"), drop_step(b))
        n = recal_steps(b)
        self.d.train(DROPE, dst, n, [*common_sets, f"run.seed={s + 1}", f"train.steps={n}", f"optim.lr={arm.lr:g}",
                                     f"schedule.warmup={max(1, n // 10)}", f"train.log_every={max(1, n // 4)}",
                                     f"train.checkpoint_every={max(1, n // 4)}", "train.keep_last=1",
                                     "drope.qk_norm=qk"], [f"run.init={src}"], show=NONE)
        return checkpoint(dst, n)


def run_all(d: Driver, runs: Runs, tab: common.Table, doc: pathlib.Path | None, plot_path: pathlib.Path | None,
            commit: str, cpu: str) -> int:
    ran = 0
    locks = runs.out / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    for s, w, b in run_order():
        with claim(locks / f"w{w}-b{b}-s{s}.lock") as mine:
            if mine:
                ran += run_unit(d, runs, tab, doc, plot_path, commit, cpu, (s, w, b))
    return ran


def run_unit(d: Driver, runs: Runs, tab: common.Table, doc: pathlib.Path | None, plot_path: pathlib.Path | None,
             commit: str, cpu: str, unit: tuple[int, int, int]) -> int:
    """One (seed, width, budget) unit: its rope run, then each arm not yet in the CSV. Several study processes may
    share one --out (each unit is claimed with a lock there); rows are appended under a lock, so each process can
    run on its own core: `OMP_NUM_THREADS=1 ... width_study` started twice."""
    s, w, b = unit
    ran = 0
    have = {(r["width"], r["budget"], r["seed"], r["arm"]) for r in tab.read()}
    need = [a for a in ARMS if (w, b, s, a.name) not in have]
    if not need:
        return 0
    d.stage(f"seed {s}, width {w} ({parameters(w) / 1e6:.2f}M parameters), {b} steps: "
            + ", ".join(a.name for a in need))
    t0 = time.monotonic()
    rope_model = common.retrying(lambda w=w, b=b, s=s: runs.train(w, b, s, ARM["rope"]), d.say)
    rope_c, rope_4c = runs.ppl(rope_model, runs.run_dir(w, b, s, "rope").name)
    rope_sec = time.monotonic() - t0
    for a in need:
        t0 = time.monotonic()
        if a.name == "rope":
            ppl_c, ppl_4c, sec = rope_c, rope_4c, rope_sec
        else:
            model = common.retrying(lambda a=a, w=w, b=b, s=s: runs.train(w, b, s, a), d.say)
            ppl_c, ppl_4c = runs.ppl(model, runs.run_dir(w, b, s, a.name).name)
            sec = time.monotonic() - t0
        row = {"width": w, "budget": b, "seed": s, "arm": a.name, "ppl_c": round(ppl_c, 4),
               "ppl_4c": round(ppl_4c, 3), "ppl_rope": round(rope_c, 4),
               "gap_pct": round(100 * (ppl_c / rope_c - 1), 3), "seconds": round(sec, 1), "commit": commit,
               "cpu": cpu}
        with locked(runs.out / "rows.lock"):
            tab.append(row)
            report(tab, doc, plot_path)
        d.say(f"w{w} b{b} s{s} {a.name}: ppl@C {ppl_c:.2f} (RoPE {rope_c:.2f}, gap {row['gap_pct']:+.1f} %), "
              f"{sec:.0f} s")
        ran += 1
    return ran


def study(argv: list[str]) -> int:
    ap = cli.Parser("width_study", prog="studies/run.sh width_study", description=__doc__.split("\n\n")[0])
    ap.add_argument("--plan", action="store_true", help="print what is left and an estimated time, then stop")
    ap.add_argument("--report", action="store_true",
                    help="rewrite the results section and the plot from the CSV alone, then stop")
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path("runs/width-study"), help="run directories")
    ap.add_argument("--csv", type=pathlib.Path, default=CSV_PATH, help="the rows (default docs/results/...)")
    ap.add_argument("--doc", type=pathlib.Path, default=DOC_PATH, help="the page whose results section is rewritten")
    ap.add_argument("--plot", type=pathlib.Path, default=PLOT_PATH, help="the plot")
    cli.add_build_option(ap, "DROPE_BUILD_DIR")
    a = ap.parse_args(argv)
    if a.plan and a.report:
        ap.error("--plan and --report exclude each other")
    out = ap.check(cli.out_dir, cli.caller_path(a.out), "--out")
    tab = table(ap.check(cli.out_file, cli.caller_path(a.csv), "--csv"))
    doc = ap.check(cli.in_file, cli.caller_path(a.doc), "--doc")
    plot_path = ap.check(cli.out_file, cli.caller_path(a.plot), "--plot")
    try:
        rows = tab.read()
    except ValueError as e:
        ap.error(str(e))
    if a.plan:
        print(plan_text(rows))
        return 0
    if a.report:
        print(report(tab, doc, plot_path))
        return 0
    bin_dir = cli.checked_build(ap, a, "DROPE_BUILD_DIR", TOOLS)
    try:
        snap, commit = common.snapshot_tools(bin_dir, TOOLS + MODULES, out / "bin")
    except common.ProvenanceError as e:
        ap.error(f"no row can be recorded: {e}")
    os.chdir(ROOT)
    d = Driver("width-study", snap, width=6, jobs=1)
    d.stage(f"tools: {snap} (commit {commit})")
    d.stage("corpus: the full Debian corpus, SentencePiece vocab 4096, token shards")
    out.mkdir(parents=True, exist_ok=True)
    with locked(out / "corpus.lock"):  # a second worker waits for the first one's corpus, then finds it made
        rc = corpus.main(["--full"])
    if rc:
        return rc
    print(plan_text(rows))
    n = run_all(d, Runs(d, out), tab, doc, plot_path, commit, common.cpu_name())
    d.stage(f"done in {d.elapsed()} s: {n} rows added, {len(tab.read())} in {tab.path}")
    print(results_md(tab.read()))
    return 0


def main(argv: list[str]) -> int:
    return run_pipeline("width_study", lambda: study(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
