"""Every number, interval, p-value and verdict that README.md and docs/ quote from a study's committed CSV, written
by this one script between the pages' `<!-- NAME:begin -->` / `<!-- NAME:end -->` markers (study.update_section).
tests/py/test_doc_numbers.py regenerates every section in memory and fails when a page disagrees with its CSV.
Rows whose commit ends in -dirty are kept and labelled, and a summary built on them opens "Exploratory, not evidence"
(docs/design.md#statistics-protocol, provenance).

  .venv/bin/python -m drope_scripts.doc_numbers            # rewrite the sections (from scripts/)
  bash scripts/run_python.sh -m drope_scripts.doc_numbers --check
"""
from __future__ import annotations

import argparse
import csv
import pathlib
import re
import sys
from collections.abc import Callable, Sequence

from . import offset_key_report as okr
from . import stats
from . import study as common
from .driver import ROOT

RESULTS = ROOT / "docs" / "results"
CLAIMS_CSV = RESULTS / "offset-key-claims.csv"
CLAIMS_BUDGET = (400, 800)  # the claims study: DroPE recalibration steps, RoPE steps (docs/claims-study.md)
C = 128


def _studies():
    """The studies' modules (imported late: studies/ imports drope_scripts)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from studies import committed_verdicts, prose_sweep, real_model_recal, width_study
    return committed_verdicts, prose_sweep, real_model_recal, width_study


def read_csv(path: pathlib.Path) -> list[dict]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# --- the claims study ------------------------------------------------------------------------------------------

def claims_doc() -> dict:
    return okr.from_csv(CLAIMS_CSV.read_text(encoding="utf-8"), CLAIMS_BUDGET, str(CLAIMS_CSV))


def _cell(t: okr.Table, label: str, mult: int, interval: bool = True) -> str:
    c = t.acc(label, 1) if mult == 1 else t.far(label, mult)
    if c is None:
        return "–"
    return c.text() if interval else f"{c.mean:.1f}"


def claims_table(doc: dict, short: bool) -> str:
    """The claims study's table: DroPE, RoPE, the scaled methods (with and without their own temperature) and the
    crop, mean [protocol's interval] over the 10 seeds."""
    t = okr.Table(doc)
    scaled = " / ".join(x.removeprefix("RoPE+") for x in okr.SCALED)

    def row(name: str, label: str) -> str:
        return f"| {name} | " + " | ".join(_cell(t, label, m) for m in (1, 2, 4, 8)) + " |"

    def joined(name: str, labels: Sequence[str]) -> str:
        return f"| {name} | – | " + " | ".join(" / ".join(_cell(t, x, m, False) for x in labels)
                                               for m in (2, 4, 8)) + " |"

    lines = ["| method | C | 2C far | 4C far | 8C far |", "|---|---:|---:|---:|---:|",
             row("DroPE, 400 RoPE + 400 recalibration steps, fitted temperature", okr.DROPE_T)]
    if not short:
        lines.append(row("DroPE without the temperature", okr.DROPE_0))
    lines.append(row("RoPE, 800 steps", okr.ROPE))
    if not short:
        lines.append(joined(f"RoPE + {scaled}, factor L/C", okr.SCALED))
    lines.append(joined(f"RoPE + {scaled}, factor L/C, each with its own fitted temperature", okr.SCALED_T))
    lines.append("| RoPE cropped to its last C tokens | – | " + " | ".join(_cell(t, okr.CROP, m, not short)
                                                                          for m in (2, 4, 8)) + " |")
    return "\n".join(lines)


SHORT = {"a": "RoPE collapses beyond C", "b": "PI hurts at 2C", "c": "NTK and YaRN behave like a cropped context",
         "d": "DroPE beats every RoPE-scaling method, with and without its own temperature, at 4C and 8C",
         "e": "DroPE recovers RoPE's accuracy at C", "f": "the temperature matters at 4C and 8C"}


def _why(cl: dict) -> str:
    """A claim's reason in a few words: its Holm p, or what kept it from a test."""
    if cl["p_holm"] is not None and cl["verdict"] in (stats.AGREES, stats.DISAGREES, stats.INCONCLUSIVE) \
            and "saturated" not in cl["test"] and "not measured" not in cl["test"]:
        return f"Holm p = {stats.fmt_p(cl['p_holm'])}"
    return cl["test"].split(": ", 1)[0] + ": " + cl["test"].split(": ", 1)[1].split(";")[0]


def claims_verdicts_text(doc: dict) -> str:
    """The six verdicts in one paragraph, the corrected rules named."""
    t = okr.Table(doc)
    cls = {cl["letter"]: cl for cl in doc["claims"]}
    parts = []
    for letter, cl in cls.items():
        margin = {"b": okr.BEATS_MARGIN, "d": okr.BEATS_MARGIN, "f": okr.BEATS_MARGIN,
                  "a": okr.COLLAPSE_MARGIN, "e": okr.RECOVERY_MARGIN, "c": okr.CROP_MARGIN}[letter]
        parts.append(f"({letter}) {SHORT[letter]} (margin {margin:g} points) **{cl['verdict']}** ({_why(cl)})")
    yarn = t.far(okr.YARN, 4)
    drope = t.far(okr.DROPE_T, 4)
    return ("Verdicts (paired over the 10 seeds; each side of a verdict at α/2 = 0.025, Holm over the six claims, "
            f"a cell with both sides ≥ {stats.CEILING:g} % saturated, not testable): " + " · ".join(parts) + ". "
            f"At 4C DroPE ({drope.mean:.1f}) and YaRN ({yarn.mean:.1f}) are both at the ceiling, so this task cannot "
            "rank them there; at C, RoPE and DroPE both are, so (e) shows that both saturate, not that DroPE "
            "matches RoPE on a harder test.")


def claims_verdicts_table(doc: dict) -> str:
    lines = ["| claim | verdict | deciding test (paired over the 10 seeds) |", "|---|---|---|"]
    for cl in doc["claims"]:
        lines.append(f"| ({cl['letter']}) {cl['what']} | **{cl['verdict']}** | {cl['test']} |")
    return "\n".join(lines)


def claims_study_results() -> str:
    doc = claims_doc()
    return "\n\n".join([claims_table(doc, short=False), claims_verdicts_table(doc), claims_verdicts_text(doc)])


def offset_key_verdicts() -> str:
    return okr.verdicts_md(claims_doc())


# --- the prose sweep -------------------------------------------------------------------------------------------

def prose_inputs():
    _, ps, _, _ = _studies()
    rows = ps.read_rows(ps.CSV_PATH)
    cells = ps.make_cells(ps.BUDGETS, ps.recipes(ps.config_float(ROOT / ps.PRETRAIN, "optim", "lr"),
                                                   ps.config_float(ROOT / ps.DROPE, "optim", "lr")))
    return ps, cells, rows


def prose_summary(link: str) -> str:
    """The prose sweep in a few sentences, from its CSV: the quickstart recipe's gap per budget, the trend, NoPE
    from scratch, the follow-ups read sequentially; the dirty rows labelled."""
    ps, cells, rows = prose_inputs()
    q = {c.budget: ps.verdict(list(ps.cell_gaps(rows, c.id).values())) for c in cells
         if c.recipe.name == "quickstart"}
    lo, hi = min(q), max(q)
    tr = ps.trend(rows)
    nope = {c.budget: ps.verdict(list(ps.cell_gaps(rows, c.id).values())) for c in cells if c.recipe.scratch}
    worse = sum(1 for c in cells if not c.recipe.follow_up
                and ps.verdict(list(ps.cell_gaps(rows, c.id).values()))["verdict"] == "DroPE worse")
    pre = sum(1 for c in cells if not c.recipe.follow_up)
    seq = {e["cell"]: e["final"] for fam in ("noqk", "nope") for e in ps.looks(cells, rows, fam)}
    nope_read = "; ".join(f"{cid}: {o['diff']:+.1f} points over {o['n']} seeds, Holm p = {ps._p(o['p_holm'])}, "
                          f"**{o['reading'].rsplit(': ', 1)[1]}**" for cid, o in seq.items() if cid.endswith("nope"))
    noqk_read = "; ".join(f"{cid}: {o['diff']:+.1f} points, **{o['reading'].rsplit(': ', 1)[1]}**"
                          for cid, o in seq.items() if cid.endswith("noqk"))
    n_seeds = sorted({v["n"] for v in q.values()})
    dirty = common.dirty_note([r["commit"] for r in rows])
    lead = ("**On prose DroPE loses, and more with budget**: at" if not dirty else
            f"**Exploratory, not evidence** ({dirty}; the width study decides): "
            f"on prose DroPE lost, and more with budget. At")
    return (f"{lead} the quickstart recipe its in-context perplexity is "
            f"{q[lo]['mean']:+.0f} % against RoPE's at {lo:,} steps and {q[hi]['mean']:+.0f} % at {hi:,} "
            f"({'–'.join(map(str, (n_seeds[0], n_seeds[-1]))) if len(n_seeds) > 1 else n_seeds[0]} seeds a cell), "
            f"{tr['slope']:+.0f} points per doubling of the budget (95 % CI {tr['low']:+.0f} to {tr['high']:+.0f}); "
            f"{worse} of the {pre} pre-registered cells are decided \"DroPE worse\" and none closes the gap (the "
            f"paper reports parity). NoPE trained from scratch is about as far behind RoPE ("
            + ", ".join(f"{v['mean']:+.0f} % at {b:,}" for b, v in sorted(nope.items())) +
            "); against DroPE, read at Pocock's level for looks at 3, 4 and 5 seeds "
            f"({ps.look_alpha():.4f} a look): {nope_read}. Dropping the QK-norm: {noqk_read}. "
            "The sweep cannot say why: "
            "it never varied the model's size, and its budgets are 0.9 to 6.8 epochs over a 957K-token corpus, so "
            f"budget and repetition move together; the width study below tests both ({link}).")


def prose_results() -> str:
    """The prose sweep page's results section (prose_sweep.results_md, which the sweep writes as rows land)."""
    ps, cells, rows = prose_inputs()
    return ps.results_md(cells, rows, ps.MIN_SEEDS, ps.MAX_SEEDS)


def prose_plain_words() -> str:
    """The prose sweep page's 'in plain words' paragraph."""
    return prose_summary("the table below is the record")


# --- the real model --------------------------------------------------------------------------------------------

def real_model_section() -> str:
    _, _, rr, _ = _studies()
    return rr.results_md(rr.FULL, rr.read_rows(rr.CSV_PATH))


def real_model_summary() -> str:
    _, _, rr, _ = _studies()
    rows = rr.read_rows(rr.CSV_PATH)
    val = {rr.key(r["model"], r["step"], r["metric"], r["length"]): r for r in rows}
    ppl = [r for r in rows if r["metric"] == "ppl" and r["model"] == "DroPE"]
    last = max(r["step"] for r in ppl)
    tokens = next(r["tokens"] for r in ppl if r["step"] == last)
    long = max(r["length"] for r in ppl if r["step"] == last and rr.key("DroPE", 0, "ppl", r["length"]) in val
               and rr.key("RoPE", last, "ppl", r["length"]) in val)

    def v(m, st, n):
        return val[rr.key(m, st, "ppl", n)]["value"]

    values = {k: r["value"] for k, r in val.items()}
    reading = " ".join(t for m in rr.MODELS if (t := rr.window_reading(values, m, last)))
    niah = sorted((r for r in rows if r["metric"] == "niah_single_1" and r["model"] == "DroPE" and r["step"] == last),
                  key=lambda r: r["length"])
    found = ("" if not niah else
             f" DroPE {'finds no needle' if all(r['value'] == 0 for r in niah) else 'finds needles'} at "
             + " and ".join(f"{r['length']:,} tokens ({r['value']:.0f} % of {r['detail'].split(',')[0]})"
                            for r in niah) + ".")
    dirty = common.dirty_note([r["commit"] for r in rows])
    lead = "On the real SmolLM2-135M" if not dirty else (
        f"**Exploratory, not evidence** ({dirty}): on the real SmolLM2-135M")
    return (f"{lead}, {tokens:,} tokens of CPU recalibration cut DroPE's perplexity at "
            f"{long:,} tokens from {v('DroPE', 0, long):.0f} to {v('DroPE', last, long):.0f} (RoPE "
            f"{v('RoPE', last, long):.1f}). At step {last}: {reading}{found} That is "
            f"1/{rr.PAPER_TOKENS / tokens:,.0f} of the paper's budget (under {rr.PAPER_TOKENS / 1e9:g}B tokens for "
            f"95 % of SmolLM-360M's performance) and says nothing about where the curve ends.")


# --- the width study -------------------------------------------------------------------------------------------

def width_line() -> str:
    _, _, _, ws = _studies()
    rows = ws.table().read()
    total = len(ws.registered())
    done = len({(r["width"], r["budget"], r["seed"], r["arm"]) for r in rows})
    head = ("**Width study** (does the prose gap shrink with model width? pre-registered, "
            "[docs/width-study.md](docs/width-study.md)): ")
    if not ws.complete(rows):
        return head + f"{done} of {total} rows, no verdict yet."
    pr = ws.primary(rows)
    words = " and ".join(ws.PRIMARY_WORDS[v] for v in pr["verdict"])
    fit = pr["fit"]
    return head + (f"{done} of {total} rows; the gap {words} (slope {fit['slope']:+.2f} points per doubling, 95 % CI "
                   f"{fit['ci95'][0]:+.2f} to {fit['ci95'][1]:+.2f}).")


# --- the recovery study ----------------------------------------------------------------------------------------

THIRD = ("lr3e-03-wu10-normqk-r50", "lr3e-03-wu10-normqk-r25", "lr3e-03-wu10-normqk-r12p5")
SCHEDULES = {(400, 400): THIRD[0], (600, 200): THIRD[1], (700, 100): THIRD[2]}  # the equal-budget ones' names


def _by_seed(rows: list[dict], recipe: str, phase: str | None = None) -> dict[int, dict]:
    return {int(r["seed"]): r for r in rows if r["recipe"] == recipe and (phase is None or r["phase"] == phase)}


def recovery_counts() -> dict[str, tuple[int, int]]:
    rows = read_csv(RESULTS / "recovery-budgets.csv")
    out = {}
    for recipe in sorted({r["recipe"] for r in rows}):
        rs = _by_seed(rows, recipe)
        out[recipe] = (sum(int(r["recovered"]) for r in rs.values()), len(rs))
    return out


def recovery_readings() -> str:
    """The third stage's pre-registered readings, as its committed report states them."""
    text = (RESULTS / "recovery-budgets.md").read_text(encoding="utf-8")
    m = re.search(r"^Readings: (.*)$", text, re.M)
    if not m:
        raise ValueError(f"{RESULTS / 'recovery-budgets.md'}: no 'Readings:' line")
    return m.group(1)


def recovery_sentence() -> str:
    k = recovery_counts()

    def c(d: int, n: int) -> str:
        got = k.get(SCHEDULES.get((d, n), f"lr3e-03-wu10-normqk-d{d}n{n}"))
        return "–" if got is None else f"{got[0]}/{got[1]}"

    return (f"The recovery study's third stage (pre-registered, 10 seeds): 400 recalibration steps recover "
            f"{c(400, 400)}, {c(600, 400)} and {c(700, 400)} from a drop at step 400, 600 or 700; 200 steps "
            f"{c(400, 200)} and {c(600, 200)}; 100 steps {c(400, 100)} and {c(700, 100)}. Readings: "
            f"{recovery_readings()} ([docs/recovery-study.md](docs/recovery-study.md))")


def determinism_check() -> str:
    """The third stage's re-run of the first stage's equal-budget schedules: the same seeds and data order, so
    a check of determinism, not an independent replication."""
    first = read_csv(RESULTS / "recovery-study.csv")
    third = read_csv(RESULTS / "recovery-budgets.csv")
    from scipy import stats as sps  # at first use: importing scipy.stats takes about 2 s

    parts, rhos = [], []
    for recipe in THIRD:
        a, b = _by_seed(first, recipe, "selection"), _by_seed(third, recipe)
        seeds = sorted(set(a) & set(b))
        same = sum(a[s]["recovered"] == b[s]["recovered"] for s in seeds)
        rho = sps.spearmanr([float(a[s]["drope_acc_C"]) for s in seeds],
                            [float(b[s]["drope_acc_C"]) for s in seeds]).statistic
        rhos.append(rho)
        name = {THIRD[0]: "400+400", THIRD[1]: "600+200", THIRD[2]: "700+100"}[recipe]
        parts.append(f"{name} {sum(int(b[s]['recovered']) for s in seeds)}/{len(seeds)} (first stage "
                     f"{sum(int(a[s]['recovered']) for s in seeds)}/{len(seeds)}; the same outcome in {same} of "
                     f"{len(seeds)} seeds)")
    return ("**Determinism check** (descriptive): the third stage re-ran the first stage's three equal-budget "
            "schedules on the same seeds 0–9 with the same data order (RoPE retrained, on another machine): "
            + ", ".join(parts) +
            f". Per seed, DroPE's accuracy at C has Spearman ρ = {min(rhos):.2f}–{max(rhos):.2f} between the two "
            "runs. The runs share their seeds, so this checks that the pipeline gives the same answers again; it is "
            "not an independent replication, and a test that treats the two as unpaired samples does not apply.")


def plateau_bullet() -> str:
    rows = read_csv(RESULTS / "recovery-axes.csv")
    v = {k: [float(r["drope_acc_C"]) for r in _by_seed(rows, k).values()] for k in
         ("lr3e-03-wu4-normnone-r25", "lr3e-03-wu10-normnone-r25")}
    low = sum(x < 60 for x in v["lr3e-03-wu4-normnone-r25"])
    words = {0: "none", 1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}
    return (f"- With the 4 % warm-up some QK-norm-free seeds stop near 50 % too ({words.get(low, low)} of "
            f"{len(v['lr3e-03-wu4-normnone-r25'])} below 60 % at 200 steps, against "
            f"{sum(x < 60 for x in v['lr3e-03-wu10-normnone-r25'])} of 10 with warm-up 10 %; "
            "[recovery-axes.csv](results/recovery-axes.csv)).")


# --- the 5-seed reproduction -----------------------------------------------------------------------------------

def reproduction_verdicts() -> str:
    cv, _, _, _ = _studies()
    return "\n".join(cv.reproduction((RESULTS / "reproduce-5seeds-REPORT.md").read_text(encoding="utf-8"))).strip()


# --- the pages -------------------------------------------------------------------------------------------------

def readme_headline() -> str:
    doc = claims_doc()
    return "\n\n".join([claims_table(doc, short=True), claims_verdicts_text(doc), recovery_sentence(),
                        prose_summary("[docs/results/prose-sweep.md](docs/results/prose-sweep.md)"),
                        real_model_summary() + " ([docs/real-model.md](docs/real-model.md))", width_line()])


def results_headline() -> str:
    doc = claims_doc()
    return "\n\n".join([claims_table(doc, short=False), claims_verdicts_text(doc),
                        prose_summary("[prose sweep](results/prose-sweep.md)")])


# (page, section, generator): every generated section of the docs.
SECTIONS: tuple[tuple[str, str, Callable[[], str]], ...] = (
    ("README.md", "headline", readme_headline),
    ("docs/results.md", "results-headline", results_headline),
    ("docs/results.md", "reproduction-verdicts", reproduction_verdicts),
    ("docs/claims-study.md", "claims-study-results", claims_study_results),
    ("docs/results/offset-key-claims.md", okr.VERDICTS_SECTION, offset_key_verdicts),
    ("docs/results/prose-sweep.md", "prose-sweep-plain", prose_plain_words),
    ("docs/results/prose-sweep.md", "prose-sweep", prose_results),
    ("docs/real-model.md", "real-model-recal", real_model_section),
    ("docs/results.md", "real-model-summary", real_model_summary),
    ("docs/recovery-study.md", "determinism-check", determinism_check),
    ("docs/recovery-study.md", "plateau-count", plateau_bullet),
)


def generate() -> dict[tuple[str, str], str]:
    return {(page, name): fn() for page, name, fn in SECTIONS}


def stale(root: pathlib.Path = ROOT) -> list[str]:
    """The sections whose page text differs from what the CSVs give now."""
    out = []
    for (page, name), text in generate().items():
        if common.section_of(root / page, name) != text.strip("\n"):
            out.append(f"{page}: section {name}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="doc_numbers", description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="only report the stale sections (exit 1 if any)")
    a = ap.parse_args(argv)
    if a.check:
        bad = stale()
        for b in bad:
            print(f"stale: {b}", file=sys.stderr)
        return 1 if bad else 0
    for (page, name), text in generate().items():
        common.update_section(ROOT / page, name, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

