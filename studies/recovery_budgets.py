"""The third stage of the recovery study (docs/recovery-study.md#third-stage-recalibration-length-or-drop-step):
the pre-registered tests of "the recalibration length decides" against "dropping earlier helps", read from a study
directory that recovery_study.py --drops ... --scratch ... fills (default runs/recovery-budgets).

Family 1: comparisons L1-L3 (recalibration length at the drop step 400), D1-D5 (drop step at a fixed length), each
with Fisher's exact test on the recovery counts and paired t tests on DroPE's accuracy at C and far accuracy at 8C,
and E1-E2 (TOST, accuracy at C within 2 points); family 2: DroPE 400+400 against ALiBi and RNoPE-SWA from scratch.
Each test counts with the smaller of its two one-sided p-values (its direction: agree or disagree); the tests of
a family are Holm-adjusted together at alpha = 0.05. Only the seeds every schedule of a comparison has finished
are read, so a partial study gives partial tests (and says how many seeds).

Writes <study>/comparisons.md and comparisons.json (or --out) and prints the Markdown.

Usage: bash studies/run.sh recovery_budgets [--study runs/recovery-budgets] [--seeds 10] [--out FILE.md]
"""
from __future__ import annotations

import csv
import json
import pathlib
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from drope_scripts import cli, results, stats
from drope_scripts import recovery as rs
from drope_scripts.atomic import write_atomic
from drope_scripts.driver import ROOT
from drope_scripts.stats import AGREES, ALPHA, DISAGREES, INCONCLUSIVE, TestResult

LR, WARMUP, QK_NORM = 3e-3, 0.1, "qk"  # the selected recipe
SCHEDULES = {"400+100": (400, 100), "400+200": (400, 200), "400+400": (400, 400), "600+200": (600, 200),
             "600+400": (600, 400), "700+100": (700, 100), "700+400": (700, 400)}
# (id, claim, X, Y): the claim favours X; the per-seed difference is X − Y.
DIRECTIONAL = (("L1", "longer recalibration helps, drop at 400", "400+400", "400+200"),
               ("L2", "longer recalibration helps, drop at 400", "400+200", "400+100"),
               ("L3", "longer recalibration helps, drop at 400", "400+400", "400+100"),
               ("D1", "an earlier drop helps, 400 steps", "400+400", "600+400"),
               ("D2", "an earlier drop helps, 400 steps", "600+400", "700+400"),
               ("D3", "an earlier drop helps, 400 steps", "400+400", "700+400"),
               ("D4", "an earlier drop helps, 200 steps", "400+200", "600+200"),
               ("D5", "an earlier drop helps, 100 steps", "400+100", "700+100"))
EQUIVALENT = (("E1", "the drop step does not matter at 400 steps (accuracy at C within 2 points)", "600+400",
               "400+400"),
              ("E2", "the drop step does not matter at 400 steps (accuracy at C within 2 points)", "700+400",
               "400+400"))
MARGIN = 2.0  # points: the recovery tolerance
FAR = 8  # far accuracy at 8C
SCRATCH = ("alibi", "rnope-swa")
COMMITTED = ROOT / "docs" / "results" / "recovery-study.csv"  # the first stage, another machine
FIRST_STAGE = {"400+400": "r50", "600+200": "r25", "700+100": "r12p5"}


@dataclass(frozen=True)
class Test:
    """One test of a family: the one-sided tests for (agree) and against (disagree) its claim."""

    id: str
    claim: str
    measure: str  # recovery | accuracy at C | far 8C | accuracy at C (TOST)
    n: int
    numbers: str  # X and Y in words
    agree: TestResult | None  # None: fewer than two seeds
    disagree: TestResult | None

    @property
    def direction(self) -> str:
        return AGREES if self.agree.p <= self.disagree.p else DISAGREES

    @property
    def p(self) -> float:
        return float("nan") if self.agree is None else min(self.agree.p, self.disagree.p)


def recipe(name: str) -> rs.Recipe:
    return rs.schedule(LR, WARMUP, QK_NORM, *SCHEDULES[name], 800)


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def directional(cid: str, claim: str, x: dict[int, rs.SeedResult], y: dict[int, rs.SeedResult],
                xn: str, yn: str) -> list[Test]:
    """Fisher on the recovery counts and paired t on accuracy at C and far 8C, over the seeds both have."""
    seeds = sorted(set(x) & set(y))
    n = len(seeds)
    kx, ky = sum(x[s].recovered() for s in seeds), sum(y[s].recovered() for s in seeds)
    out = []
    for measure, get in (("accuracy at C", lambda r: r.drope_acc), (f"far {FAR}C", lambda r: r.far[FAR])):
        a, b = [get(x[s]) for s in seeds], [get(y[s]) for s in seeds]
        text = f"{xn} {_mean(a):.1f}, {yn} {_mean(b):.1f}" if n else "no seeds"
        t = (stats.paired_t(a, b, "greater"), stats.paired_t(a, b, "less")) if n >= 2 else (None, None)
        out.append(Test(cid, claim, measure, n, text, *t))
    fisher = ((stats.fisher_exact(kx, n, ky, n, "greater"), stats.fisher_exact(kx, n, ky, n, "less")) if n >= 2
              else (None, None))
    out.insert(0, Test(cid, claim, "recovered seeds", n, f"{xn} {kx}/{n}, {yn} {ky}/{n}", *fisher))
    return out


def equivalent(cid: str, claim: str, x: Sequence[float], y: Sequence[float], text: str,
               measure: str = "accuracy at C (TOST)") -> Test:
    """TOST within ±MARGIN; against it the one-sided test outside the margin with the smaller p."""
    if len(x) < 2:
        return Test(cid, claim, measure, len(x), text, None, None)
    tost, _, _ = stats.tost_paired(x, y, MARGIN)
    below, above = stats.paired_t(x, y, "less", -MARGIN), stats.paired_t(x, y, "greater", MARGIN)
    return Test(cid, claim, measure, len(x), text, tost, below if below.p <= above.p else above)


def adjust(tests: Sequence[Test]) -> list[dict]:
    """Holm over the family; each test's verdict: its direction where the adjusted p < ALPHA."""
    adjusted = stats.holm([t.p for t in tests])
    out = []
    for t, ph in zip(tests, adjusted):
        verdict = INCONCLUSIVE if t.agree is None or not ph < ALPHA else t.direction
        deciding = None if t.agree is None else (t.agree if t.direction == AGREES else t.disagree)
        out.append({"test": t, "p_holm": ph, "verdict": verdict, "deciding": deciding})
    return out


def comparison_verdict(verdicts: Sequence[str]) -> str:
    """Agrees: a test agrees and none disagrees; disagrees: the reverse; else inconclusive."""
    if AGREES in verdicts and DISAGREES not in verdicts:
        return AGREES
    if DISAGREES in verdicts and AGREES not in verdicts:
        return DISAGREES
    return INCONCLUSIVE


def readings(by_id: dict[str, str]) -> dict[str, str]:
    """The two pre-registered readings from the comparisons' verdicts (L*, D*, E*)."""
    ls = [by_id[c] for c in ("L1", "L2", "L3")]
    ds = [by_id[c] for c in ("D1", "D2", "D3", "D4", "D5")]
    es = [by_id[c] for c in ("E1", "E2")]
    if AGREES in ls and AGREES not in ds and all(e == AGREES for e in es):
        length = AGREES
    elif AGREES not in ls and AGREES in ds:
        length = DISAGREES
    else:
        length = INCONCLUSIVE
    if AGREES in ds:
        earlier = AGREES
    elif DISAGREES in ds:
        earlier = DISAGREES
    else:
        earlier = INCONCLUSIVE
    return {"the recalibration length decides": length, "dropping earlier helps, at a fixed length": earlier}


# ---- reading the study --------------------------------------------------------------------------------------

def runner(study: pathlib.Path) -> rs.Runner:
    try:
        s = json.loads((study / "settings.json").read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{study / 'settings.json'}: cannot read: {e}") from e
    st = rs.Study(study, tuple(recipe(n) for n in SCHEDULES), (), (), int(s["steps"]), int(s["queries"]),
                  tuple(s["multipliers"]), str(s["temperature"]), int(s["fit_queries"]), rs.TOLERANCE, 1)
    return rs.Runner(st, None)


def finished(r: rs.Runner, prefix: pathlib.Path, seed: int) -> bool:
    return rs.json_of(prefix).is_file() and rs.json_of(r.rope_eval(seed, rs.HELDOUT)).is_file()


def load(study: pathlib.Path, seeds: int) -> tuple[dict[str, dict[int, rs.SeedResult]], dict[str, dict]]:
    """(schedule → seed → result, scheme → seed → result) of the finished held-out evaluations."""
    r = runner(study)
    drope = {name: {s: r.result(recipe(name), s, rs.HELDOUT) for s in range(seeds)
                    if finished(r, r.drope_eval(recipe(name), s, rs.HELDOUT), s)} for name in SCHEDULES}
    scratch = {n: {s: r.scratch_result(n, s, rs.HELDOUT) for s in range(seeds)
                   if finished(r, r.scratch_eval(n, s, rs.HELDOUT), s)} for n in SCRATCH}
    return drope, scratch


def committed_counts(path: pathlib.Path = COMMITTED) -> dict[str, tuple[int, int]]:
    """The first stage's recovery counts (held-out, seeds 0–9) of the three equal-budget schedules."""
    with path.open(encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["phase"] == "selection" and r["split"] == "heldout"]
    out = {}
    for name, tail in FIRST_STAGE.items():
        mine = [r for r in rows if r["recipe"] == f"lr3e-03-wu10-normqk-{tail}"]
        out[name] = (sum(int(r["recovered"]) for r in mine), len(mine))
    return out


# ---- the report ---------------------------------------------------------------------------------------------

def _p(p: float) -> str:
    return "–" if p != p else stats.fmt_p(p)


def _text(t: TestResult) -> str:
    return t.text("odds ratio" if t.test.startswith("Fisher") else "mean d")


def test_table(rows: Sequence[dict]) -> list[str]:
    lines = ["| id | measure | seeds | numbers | deciding one-sided test | Holm p | verdict |",
             "|---|---|---:|---|---|---:|---|"]
    for e in rows:
        t = e["test"]
        test = "fewer than two seeds" if e["deciding"] is None else _text(e["deciding"])
        lines.append(f"| {t.id} | {t.measure} | {t.n} | {t.numbers} | {test} | {_p(e['p_holm'])} | "
                     f"**{e['verdict']}** |")
    return lines


def family1(drope: dict[str, dict[int, rs.SeedResult]]) -> tuple[list[dict], dict[str, str]]:
    tests = []
    for cid, claim, xn, yn in DIRECTIONAL:
        tests += directional(cid, claim, drope[xn], drope[yn], xn, yn)
    for cid, claim, xn, yn in EQUIVALENT:
        seeds = sorted(set(drope[xn]) & set(drope[yn]))
        x, y = [drope[xn][s].drope_acc for s in seeds], [drope[yn][s].drope_acc for s in seeds]
        text = f"{xn} {_mean(x):.1f}, {yn} {_mean(y):.1f}" if seeds else "no seeds"
        tests.append(equivalent(cid, claim, x, y, text))
    rows = adjust(tests)
    by_id = {}
    for cid in [c[0] for c in DIRECTIONAL + EQUIVALENT]:
        by_id[cid] = comparison_verdict([e["verdict"] for e in rows if e["test"].id == cid])
    return rows, by_id


def family2(drope: dict[str, dict[int, rs.SeedResult]], scratch: dict[str, dict]) -> list[dict]:
    tests, ref = [], drope["400+400"]
    for cid, n in (("B1", "alibi"), ("B2", "rnope-swa")):
        seeds = sorted(set(ref) & set(scratch[n]))
        x, y = [ref[s].far[FAR] for s in seeds], [scratch[n][s].far[FAR] for s in seeds]
        label = rs.SCRATCH_LABELS[n]
        text = f"DroPE 400+400 {_mean(x):.1f}, {label} {_mean(y):.1f}" if seeds else "no seeds"
        t = (stats.paired_t(x, y, "greater"), stats.paired_t(x, y, "less")) if len(seeds) >= 2 else (None, None)
        tests.append(Test(cid, f"DroPE 400+400 exceeds {label} at far {FAR}C", f"far {FAR}C", len(seeds), text, *t))
    for cid, n in (("B3", "alibi"), ("B4", "rnope-swa")):
        rows = [scratch[n][s] for s in sorted(scratch[n])]
        x, y = [r.drope_acc for r in rows], [r.rope_acc for r in rows]
        label = rs.SCRATCH_LABELS[n]
        text = f"{label} {_mean(x):.1f}, RoPE {_mean(y):.1f}" if rows else "no seeds"
        tests.append(equivalent(cid, f"{label} reaches RoPE's accuracy at C within {MARGIN:g} points", x, y, text))
    return adjust(tests)


def summary_table(drope: dict[str, dict[int, rs.SeedResult]], scratch: dict[str, dict],
                  multipliers: Sequence[int]) -> list[str]:
    far_ms = [m for m in multipliers if m > 1]
    lines = ["| schedule | budget | seeds | recovered [Wilson 95 %] | RoPE acc@C | DroPE acc@C | " +
             " | ".join(f"far {m}C" for m in far_ms) + " | fitted c (median) |",
             "|---|---:|---:|---|---:|---:|" + "---:|" * len(far_ms) + "---:|"]
    rows = [(name, f"{sum(SCHEDULES[name])}", drope[name]) for name in SCHEDULES]
    rows += [(rs.SCRATCH_LABELS[n] + " (scratch)", "800", scratch[n]) for n in SCRATCH]
    for name, budget, res in rows:
        if not res:
            lines.append(f"| {name} | {budget} | 0 | not run yet | | | " + "| " * len(far_ms) + "|")
            continue
        s = rs.recipe_summary([res[k] for k in sorted(res)], multipliers)
        cs = [r.temperature for r in res.values() if r.temperature is not None]
        c = f"{statistics.median(cs):.2f}" if cs else "–"
        lines.append(f"| {name} | {budget} | {s['n']} | {rs.rate_text(s)} | {rs.cell_text(s['rope_accuracy'])} | "
                     f"{rs.cell_text(s['accuracy'])} | " + " | ".join(rs.cell_text(s["far"][str(m)]) for m in far_ms) +
                     f" | {c} |")
    return lines


def per_seed_table(drope: dict[str, dict[int, rs.SeedResult]], seeds: int) -> list[str]:
    lines = ["| schedule | " + " | ".join(f"s{s}" for s in range(seeds)) + " |", "|---|" + "---:|" * seeds]
    for name, res in drope.items():
        lines.append(f"| {name} | " + " | ".join("–" if s not in res else f"{res[s].drope_acc:.0f}"
                                                 for s in range(seeds)) + " |")
    return lines


def report(study: pathlib.Path, seeds: int) -> tuple[str, dict]:
    drope, scratch = load(study, seeds)
    multipliers = runner(study).st.multipliers
    f1, by_id = family1(drope)
    read = readings(by_id)
    f2 = family2(drope, scratch)
    first = committed_counts()
    lines = ["# Recovery study, third stage: recalibration length or drop step", "",
             f"Study directory `{study}`; held-out split; seeds finished per schedule below (of {seeds}). Protocol "
             "and readings: docs/recovery-study.md#third-stage-recalibration-length-or-drop-step. Accuracies: mean "
             "over seeds [the protocol's 95 % interval]; recovered: DroPE at C ≥ the seed's RoPE (step 800) − 2 "
             "points.", "", "## Schedules", "", *summary_table(drope, scratch, multipliers), "",
             "DroPE's accuracy at C per seed (%):", "", *per_seed_table(drope, seeds), "",
             "## Family 1 (Holm over its 26 tests)", "", *test_table(f1), "",
             "Comparisons: " + "; ".join(f"{c} {v}" for c, v in by_id.items()) + ".", "",
             "Readings: " + "; ".join(f"**{k}**: {v}" for k, v in read.items()) + ".", "",
             "## Replication of the first stage (descriptive; other machine, other RoPE runs)", "",
             "| schedule | first stage | here | Fisher exact, two-sided |", "|---|---|---|---:|"]
    for name, (k1, n1) in first.items():
        res = drope[name]
        k2, n2 = sum(r.recovered() for r in res.values()), len(res)
        p = stats.fisher_exact(k1, n1, k2, n2).p if n2 else float("nan")
        lines.append(f"| {name} | {k1}/{n1} | {k2}/{n2} | {_p(p)} |")
    lines += ["", "## Family 2: from scratch (Holm over its 4 tests)", "", *test_table(f2), ""]
    doc = {"schema": results.SCHEMA, "schema_version": results.SCHEMA_VERSION, "kind": "recovery-budgets",
           "study": str(study), "seeds": {n: sorted(r) for n, r in {**drope, **scratch}.items()},
           "family1": [_row(e) for e in f1], "comparisons": by_id, "readings": read,
           "family2": [_row(e) for e in f2], "first_stage_counts": first,
           "per_seed": [rs.seed_doc(r, "third-stage", rs.TOLERANCE) for res in (*drope.values(), *scratch.values())
                        for r in res.values()]}
    return "\n".join(lines), doc


def _row(e: dict) -> dict:
    t = e["test"]
    d = e["deciding"]
    return {"id": t.id, "claim": t.claim, "measure": t.measure, "n": t.n, "numbers": t.numbers,
            "test": None if d is None else _text(d), "p": None if d is None else d.p,
            "p_holm": None if e["p_holm"] != e["p_holm"] else e["p_holm"], "verdict": e["verdict"]}


def main(argv: list[str]) -> int:
    ap = cli.Parser("recovery_budgets", prog="bash studies/run.sh recovery_budgets",
                    description=__doc__.splitlines()[0])
    ap.add_argument("--study", default="runs/recovery-budgets", help="the study directory (default "
                    "runs/recovery-budgets)")
    ap.add_argument("--seeds", type=cli.int_type(2), default=10, help="seeds 0..N-1 read, N >= 2 (default 10)")
    ap.add_argument("--out", help="the Markdown file (default <study>/comparisons.md; JSON beside it)")
    a = ap.parse_args(argv)
    study = ap.check(cli.in_dir, cli.caller_path(a.study).resolve(), "--study")
    out = ap.check(cli.out_file, cli.caller_path(a.out).resolve(), "--out") if a.out else study / "comparisons.md"
    try:
        text, doc = report(study, a.seeds)
    except (results.ResultsError, ValueError, OSError, KeyError) as e:
        print(f"recovery_budgets: {e}", file=sys.stderr)
        return 1
    write_atomic(out, text + "\n")
    write_atomic(out.with_suffix(".json"), json.dumps(doc, indent=1, default=str) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
