"""The verdicts of docs/results.md and docs/recovery-study.md re-derived from the committed data under the
statistics protocol (docs/design.md#statistics-protocol), with the test and p-value behind each. Reads only files
under docs/results/; trains and evaluates nothing.

  bash studies/run.sh committed_verdicts [--out FILE]   # Markdown on stdout (and in FILE)

What each part reads:
- recovery-study.csv: per seed, RoPE's and DroPE's accuracy at C and DroPE's far accuracy, for the 6 first-stage
  recipes on selection seeds 0–9 (held-out split) and the selected recipe on confirmation seeds 1000–1009 (test
  split). The confirmation seeds give the headline's DroPE row and claim (e) with its paired test.
- recovery-axes.csv (second stage, 12 recipes at lr 3e-3) and recovery-axes-lr1e-3-r50.md (4 recipes at lr 1e-3,
  counts): the secondary claims, Fisher on counts and paired t on per-seed accuracies.
- reproduce-5seeds-REPORT.md: the 5-seed reproduction's table, means and 95 % t half-widths only (its per-seed
  values were not committed). Tests from those summaries: one-sample t where the claim compares with a constant,
  Welch's unpaired t between methods (the protocol's paired test needs the per-seed values). Claim (c) reads the
  table's `RoPE crop` row (drope-eval offset-key --crop) where it has one: equivalence within 5 points by TOST of
  Welch's t; without it, the crop's bound (any model's far accuracy under the crop is at most 100/16 %).
- prose-drop-study.md: the prose gap per recalibration share, mean and half-width over 5 seeds.
- offset-key-claims.csv (when committed): the claims study on fresh seeds 2000–2009 (docs/claims-study.md), every
  method's per-seed values: claims (a)–(f) redone with the paired tests (offset_key_report.from_csv).
Far cells of the CSVs have no committed query counts; their Wilson part uses the expected number of far queries
among 1,000 (far_fraction), so those intervals are approximate in the query-noise part only.
"""
from __future__ import annotations

import csv
import pathlib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from drope_scripts import cli, offset_key_report, stats
from drope_scripts.atomic import write_atomic
from drope_scripts.driver import ROOT

RESULTS = ROOT / "docs" / "results"
C = 128
QUERIES = 1000  # per length and seed
QUERY_TOKENS = 12  # the query block: 4 × (Q_c, SEP, value)
RECOVERY_MARGIN = 2.0
COLLAPSE_MARGIN = 10.0
BEATS_MARGIN = offset_key_report.BEATS_MARGIN
CROP_BOUND, CROP_MARGIN = 100.0 / 16, 5.0
PPL_GAP_MARGIN = 5.0
HALF_WIDTH_FLOOR = 0.05  # the committed tables print half-widths to 0.1
SELECTED = "lr3e-03-wu10-normqk-r50"
CLAIMS_BUDGET = (400, 800)  # the claims study: DroPE recalibration steps, RoPE steps
# The 5-seed reproduction's per-seed DroPE accuracy at C (docs/results.md, from its run); its RoPE row at C is
# 100.0 ± 0.0 over the 5 seeds, taken as 100 in each.
REPRO_DROPE_AT_C = (100.0, 99.7, 100.0, 100.0, 100.0)


def far_fraction(mult: int, c: int = C) -> float:
    """The expected share of far queries at L = mult·C: body positions 1 … B uniform (B = L − 1 − 12), the k-th
    query's SEP at B + 2 + 3k, far when the needle is more than C before it: (B + 1 + 3k − C) / B, averaged over
    k = 0 … 3."""
    body = mult * c - 1 - QUERY_TOKENS
    return sum(max(0, body + 1 + 3 * k - c) for k in range(4)) / (4 * body)


def counts(values: Sequence[float], n: float) -> tuple[int, int]:
    """Pooled counts of accuracies (percent) over seeds, each of about n queries."""
    m = round(n)
    return sum(round(v * m / 100) for v in values), m * len(values)


def interval_text(values: Sequence[float], n: float) -> str:
    lo, hi = stats.accuracy_interval(list(values), counts(values, n))
    return f"{sum(values) / len(values):.1f} [{lo:.1f}, {hi:.1f}]"


# ---- committed inputs ---------------------------------------------------------------------------------------

def load_rows(path: pathlib.Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def per_seed(rows: list[dict], recipe: str, phase: str = "selection") -> dict[int, dict]:
    out = {int(r["seed"]): r for r in rows if r["recipe"] == recipe and r["phase"] == phase}
    if not out:
        raise ValueError(f"no rows of {recipe} ({phase})")
    return dict(sorted(out.items()))


def column(rows: dict[int, dict], key: str) -> list[float]:
    return [float(r[key]) for r in rows.values()]


def recovered(rows: dict[int, dict]) -> tuple[int, int]:
    return sum(int(r["recovered"]) for r in rows.values()), len(rows)


def table_cells(text: str) -> dict[str, list[tuple[float, float] | None]]:
    """The offset-key table of a report: label → per column (mean, half-width) or None for '–'."""
    out = {}
    for line in text.splitlines():
        m = re.match(r"^\| (RoPE|RoPE\+PI|RoPE\+NTK|RoPE\+YaRN|RoPE crop|DroPE\+temp|DroPE c=0) \| (.*) \|$", line)
        if not m or "±" not in line:
            continue
        cells = []
        for c in m.group(2).split(" | "):
            c = c.strip()
            if c == "–":
                cells.append(None)
            else:
                mean, half = c.split(" ± ")
                cells.append((float(mean), float(half)))
        out[m.group(1)] = cells
    return out


def lr1e3_counts(text: str) -> dict[str, tuple[int, int]]:
    """Recipe → (recovered, seeds) from a recovery study's Markdown ranking."""
    return {m.group(1): (int(m.group(2)), int(m.group(3)))
            for m in re.finditer(r"`(lr[^`]+)`[^\n]*?\| (\d+)/(\d+) = ", text)}


def prose_gaps(text: str) -> dict[str, tuple[float, float]]:
    """Recalibration share → (mean gap %, half-width) from the prose drop study's table."""
    return {m.group(1): (float(m.group(2)), float(m.group(3)))
            for m in re.finditer(r"\| DroPE \| ([\d.]+ %) \(\d+\) \|.*\| \+([\d.]+) ± ([\d.]+) % \|", text)}


# ---- verdict helpers ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Line:
    """One re-derived statement: what, the verdict and the test behind it."""

    what: str
    verdict: str
    test: str

    def row(self) -> str:
        return f"| {self.what} | **{self.verdict}** | {self.test} |"


def posthoc(test: stats.TestResult, expected_sign: int) -> str:
    """A secondary claim's verdict from its two-sided test (docs/design.md#statistics-protocol): agrees when
    p < α with the effect in the stated direction, disagrees when p < α against it, else inconclusive."""
    if test.p >= stats.ALPHA:
        return stats.INCONCLUSIVE
    effect = test.estimate - (1.0 if test.test.startswith("Fisher") else 0.0)
    return stats.AGREES if effect * expected_sign > 0 else stats.DISAGREES


def fisher_line(what: str, a: tuple[int, int], b: tuple[int, int], labels: tuple[str, str]) -> Line:
    t = stats.fisher_exact(*a, *b, "two-sided")
    one = stats.fisher_exact(*a, *b, "greater")
    return Line(what, posthoc(t, +1), f"{labels[0]} {a[0]}/{a[1]} vs {labels[1]} {b[0]}/{b[1]}: Fisher exact, "
                                      f"two-sided {stats.p_text(t.p)} (one-sided {stats.fmt_p(one.p)})")


def paired_line(what: str, x: Sequence[float], y: Sequence[float], labels: tuple[str, str], unit: str = "") -> Line:
    t = stats.paired_t(x, y, "two-sided")
    return Line(what, posthoc(t, +1), f"{labels[0]} − {labels[1]}, mean d = {t.estimate:+.2f}{unit} over "
                                      f"{t.n} seeds: paired t, two-sided, t({t.df}) = {stats.fmt_stat(t.statistic)}, "
                                      f"{stats.p_text(t.p)}")


# ---- the parts ----------------------------------------------------------------------------------------------

def headline(study: list[dict]) -> list[str]:
    """The confirmation seeds: DroPE's row with the protocol's intervals, and claim (e) with its TOST."""
    conf = per_seed(study, SELECTED, "confirmation")
    rope, drope = column(conf, "rope_acc_C"), column(conf, "drope_acc_C")
    far = {m: column(conf, f"far_{m}C") for m in (2, 4, 8)}
    e = stats.decide("(e)", [stats.equivalence_cell("DroPE − RoPE at C", drope, rope, RECOVERY_MARGIN,
                                                    ceiling=stats.CEILING)])
    seeds = list(conf)
    return [
        f"Confirmation seeds {seeds[0]}–{seeds[-1]} (test split, the selected recipe; recovery-study.csv):\n",
        "| method | C (all) | 2C (far) | 4C (far) | 8C (far) |", "|---|---:|---:|---:|---:|",
        f"| RoPE | {interval_text(rope, QUERIES)} | – | – | – |",
        f"| DroPE (fitted temperature) | {interval_text(drope, QUERIES)} | " +
        " | ".join(interval_text(far[m], QUERIES * far_fraction(m)) for m in (2, 4, 8)) + " |",
        "",
        f"- (e) DroPE recovers RoPE's accuracy at C within {RECOVERY_MARGIN:g} points: **{e.verdict}** ({e.test}).",
        f"- recovered seeds (within 2 points of the seed's RoPE): {sum(int(r['recovered']) for r in conf.values())}/"
        f"{len(conf)}, Wilson 95 % [" + ", ".join(f"{100 * v:.0f}" for v in stats.wilson(
            sum(int(r['recovered']) for r in conf.values()), len(conf))) + "]",
        "",
    ]


def crop_cell(x: str, mult: int, far: tuple[float, float], crop: tuple[float, float] | None, n: int
              ) -> stats.CellTest:
    """One cell of claim (c) from summaries (mean, sample std over n seeds): far(x) at mult·C against the measured
    crop, equivalence within CROP_MARGIN (agree: TOST of Welch's t; disagree: the one-sided Welch test that puts
    the difference outside the margin); without the crop (None), only the bound: disagree when the one-sample t puts
    far(x) above CROP_BOUND + CROP_MARGIN, never agree."""
    label, (m, s) = f"{x} − crop at {mult}C", far
    if crop is None:
        return stats.CellTest(label, disagree=stats.one_sample_t_from_summary(
            m, s, n, CROP_BOUND + CROP_MARGIN, "greater"), what=f"mean far({x})",
            why="crop not measured: can disagree, not agree", numbers=f"far {m:.1f}")
    mc, sc = crop
    tost, _, _ = stats.tost_welch_from_summary(m, s, n, mc, sc, n, CROP_MARGIN)
    below = stats.welch_t_from_summary(m, s, n, mc, sc, n, "less", -CROP_MARGIN)
    above = stats.welch_t_from_summary(m, s, n, mc, sc, n, "greater", CROP_MARGIN)
    return stats.CellTest(label, tost, below if below.p <= above.p else above, what=f"far({x}) − far(crop)",
                          numbers=f"far {m:.1f} vs crop {mc:.1f}")


def reproduction(report: str) -> list[str]:
    """Claims (a)–(f) on the 5-seed reproduction's summaries (means and t half-widths over 5 seeds)."""
    t = table_cells(report)
    n = 5
    # A half-width printed as 0.0 is below 0.05: taken as 0.05, so a rounded table gives no infinite t.
    sd = {k: [None if c is None else (c[0], stats.sd_from_half_width(max(c[1], HALF_WIDTH_FLOOR), n)) for c in v]
          for k, v in t.items()}
    col = {1: 0, 2: 1, 4: 2, 8: 3}

    def get(label, mult):
        return sd[label][col[mult]]

    def welch_cell(label, x, y, alt_margin=BEATS_MARGIN):
        (m1, s1), (m2, s2) = x, y
        numbers = f"{m1:.1f} vs {m2:.1f}"
        if m1 >= stats.CEILING and m2 >= stats.CEILING:
            return stats.saturated_cell(label, numbers=numbers)
        return stats.CellTest(label, stats.welch_t_from_summary(m1, s1, n, m2, s2, n, "greater", alt_margin),
                              stats.welch_t_from_summary(m1, s1, n, m2, s2, n, "less", alt_margin), numbers=numbers)

    claims = []
    # (a): RoPE at C is 100.0 ± 0.0 (the same in every seed to the printed digit), so the paired difference
    # 100 − far(L) has far's spread: one-sample t of far(L) against 100 − 10.
    cells = []
    for mult in (4, 8):
        m, s = get("RoPE", mult)
        cells.append(stats.CellTest(
            f"RoPE C − {mult}C", stats.one_sample_t_from_summary(m, s, n, 100 - COLLAPSE_MARGIN, "less"),
            stats.one_sample_t_from_summary(m, s, n, 100 - COLLAPSE_MARGIN, "greater"), what=f"mean far({mult}C)",
            numbers=f"far {m:.1f}"))
    claims.append(("(a) RoPE collapses beyond C (falls by more than 10 points)", cells))
    claims.append((f"(b) PI hurts at 2C (by more than {BEATS_MARGIN:g} points)",
                   [welch_cell("RoPE − PI at 2C", get("RoPE", 2), get("RoPE+PI", 2))]))
    cells = [crop_cell(x, mult, get(x, mult), get("RoPE crop", mult) if "RoPE crop" in sd else None, n)
             for x in ("RoPE+NTK", "RoPE+YaRN") for mult in (2, 4, 8)]
    claims.append(("(c) NTK and YaRN behave like cropping the context to C", cells))
    cells = []
    for mult in (4, 8):
        for x in ("RoPE+PI", "RoPE+NTK", "RoPE+YaRN"):
            cells.append(welch_cell(f"DroPE − {x.removeprefix('RoPE+')} at {mult}C", get("DroPE+temp", mult),
                                    get(x, mult)))
        cells += [stats.CellTest(f"DroPE − {x}+temp at {mult}C", why=f"RoPE+{x}+temp was not measured")
                  for x in ("PI", "NTK", "YaRN")]
    untempered = [c for c in cells if c.agree is not None or c.saturated]
    claims.append((f"(d) DroPE beats every RoPE-scaling method by more than {BEATS_MARGIN:g} points, with and without "
                   "a fitted temperature, at 4C and 8C", cells))
    rope_c = [100.0] * n
    claims.append(("(e) DroPE recovers RoPE's accuracy at C (within 2 points)", [
        stats.equivalence_cell("DroPE − RoPE at C", list(REPRO_DROPE_AT_C), rope_c, RECOVERY_MARGIN,
                               ceiling=stats.CEILING)]))
    claims.append((f"(f) the temperature matters at 4C and 8C (by more than {BEATS_MARGIN:g} points)", [
        welch_cell(f"DroPE temp − c=0 at {mult}C", get("DroPE+temp", mult), get("DroPE c=0", mult))
        for mult in (4, 8)]))
    out = list(zip([c[0] for c in claims], stats.decide_family(claims)))
    out.insert(4, ("(d′) the same against PI / NTK / YaRN without a temperature only (outside the family, alone)",
                   stats.decide("(d′)", untempered)))
    lines = ["| claim | verdict | deciding test |", "|---|---|---|"]
    lines += [f"| {what} | **{v.verdict}** | {v.test} |" for what, v in out]
    return lines + [""]


def secondary(study: list[dict], axes: list[dict], lr1e3: dict[str, tuple[int, int]]) -> list[Line]:
    sel = {r: per_seed(study, r) for r in sorted({x["recipe"] for x in study if x["phase"] == "selection"})}
    ax = {r: per_seed(axes, r) for r in sorted({x["recipe"] for x in axes})}
    out = [
        fisher_line("higher lr helps at 200 steps (drop at 600)", recovered(sel["lr3e-03-wu10-normqk-r25"]),
                    recovered(sel["lr1e-03-wu10-normqk-r25"]), ("lr 3e-3", "lr 1e-3")),
        fisher_line("higher lr helps at 100 steps (drop at 700)", recovered(sel["lr3e-03-wu10-normqk-r12p5"]),
                    recovered(sel["lr1e-03-wu10-normqk-r12p5"]), ("lr 3e-3", "lr 1e-3")),
        paired_line("higher lr sharpens far accuracy at 8C with 400 steps",
                    column(sel["lr3e-03-wu10-normqk-r50"], "far_8C"), column(sel["lr1e-03-wu10-normqk-r50"], "far_8C"),
                    ("lr 3e-3", "lr 1e-3"), " points"),
        fisher_line("drop at 400 / 400 steps recovers more than drop at 600 / 200 (lr 3e-3)",
                    recovered(sel["lr3e-03-wu10-normqk-r50"]), recovered(sel["lr3e-03-wu10-normqk-r25"]),
                    ("400 steps", "200 steps")),
        fisher_line("drop at 400 / 400 steps recovers more than drop at 600 / 200 (lr 1e-3)",
                    recovered(sel["lr1e-03-wu10-normqk-r50"]), recovered(sel["lr1e-03-wu10-normqk-r25"]),
                    ("400 steps", "200 steps")),
        fisher_line("drop at 600 / 200 steps recovers more than drop at 700 / 100 (lr 3e-3)",
                    recovered(sel["lr3e-03-wu10-normqk-r25"]), recovered(sel["lr3e-03-wu10-normqk-r12p5"]),
                    ("200 steps", "100 steps")),
        fisher_line("the earlier reproduction's 2 of 3 and this split's 2 of 10 differ (earlier recipe)", (2, 3),
                    recovered(sel["lr1e-03-wu10-normqk-r25"]), ("3-seed run", "selection")),
        fisher_line("a short warm-up hurts QK-norm at 200 steps (lr 3e-3)", recovered(ax["lr3e-03-wu10-normqk-r25"]),
                    recovered(ax["lr3e-03-wu4-normqk-r25"]), ("warm-up 10 %", "4 %")),
        fisher_line("QK-norm helps at 400 steps, lr 3e-3, warm-up 10 %", recovered(ax["lr3e-03-wu10-normqk-r50"]),
                    recovered(ax["lr3e-03-wu10-normnone-r50"]), ("QK-norm", "none")),
        fisher_line("QK-norm helps at 400 steps, lr 3e-3, warm-up 4 %", recovered(ax["lr3e-03-wu4-normqk-r50"]),
                    recovered(ax["lr3e-03-wu4-normnone-r50"]), ("QK-norm", "none")),
        fisher_line("QK-norm helps at 400 steps, lr 1e-3, warm-up 10 %", lr1e3["lr1e-03-wu10-normqk-r50"],
                    lr1e3["lr1e-03-wu10-normnone-r50"], ("QK-norm", "none")),
        fisher_line("QK-norm helps at 400 steps, lr 1e-3, warm-up 4 %", lr1e3["lr1e-03-wu4-normqk-r50"],
                    lr1e3["lr1e-03-wu4-normnone-r50"], ("QK-norm", "none")),
        paired_line("without QK-norm, 200-step seeds end higher at C (warm-up 10 %)",
                    column(ax["lr3e-03-wu10-normnone-r25"], "drope_acc_C"),
                    column(ax["lr3e-03-wu10-normqk-r25"], "drope_acc_C"), ("none", "QK-norm"), " points"),
    ]
    plateau = {k: (sum(float(r["drope_acc_C"]) < 60 for r in ax[k].values()), len(ax[k]))
               for k in ("lr3e-03-wu10-normqk-r25", "lr3e-03-wu10-normnone-r25")}
    out.append(fisher_line("with QK-norm more 200-step seeds stop near the plateau (< 60 % at C, warm-up 10 %)",
                           plateau["lr3e-03-wu10-normqk-r25"], plateau["lr3e-03-wu10-normnone-r25"],
                           ("QK-norm", "none")))
    return out


def prose(text: str) -> list[str]:
    gaps = prose_gaps(text)
    lines = ["| recalibration share | gap vs RoPE at C | DroPE matches RoPE within 5 % | test |", "|---|---:|---|---|"]
    for share, (mean, half) in gaps.items():
        sd = stats.sd_from_half_width(half, 5)
        above = stats.one_sample_t_from_summary(mean, sd, 5, PPL_GAP_MARGIN, "greater")
        tost = max(stats.one_sample_t_from_summary(mean, sd, 5, -PPL_GAP_MARGIN, "greater").p,
                   stats.one_sample_t_from_summary(mean, sd, 5, PPL_GAP_MARGIN, "less").p)
        verdict = stats.AGREES if tost < stats.ALPHA / 2 else stats.DISAGREES if above.p < stats.ALPHA / 2 else \
            stats.INCONCLUSIVE
        lines.append(f"| {share} | +{mean:.1f} % [{mean - half:.1f}, {mean + half:.1f}] | **{verdict}** | "
                     f"{above.text('mean gap %')} (TOST {stats.p_text(tost)}) |")
    return lines + [""]


def recovery_table(study: list[dict]) -> list[str]:
    """The first stage's recipes (selection) and the confirmation with the protocol's intervals: recovered
    seeds with their Wilson interval, DroPE's accuracy at C and far accuracy per length."""
    lines = ["| recipe | phase | recovered [Wilson 95 %] | DroPE acc@C | far 2C | far 4C | far 8C |",
             "|---|---|---|---:|---:|---:|---:|"]
    keys = sorted({(r["phase"], r["recipe"]) for r in study}, key=lambda k: (k[0] != "selection", k[1]))
    for phase, recipe in keys:
        rows = per_seed(study, recipe, phase)
        k, n = recovered(rows)
        lo, hi = stats.wilson(k, n)
        cells = [interval_text(column(rows, "drope_acc_C"), QUERIES)]
        cells += [interval_text(column(rows, f"far_{m}C"), QUERIES * far_fraction(m)) for m in (2, 4, 8)]
        lines.append(f"| {recipe} | {phase} | {k}/{n} [{100 * lo:.0f}, {100 * hi:.0f}] | " + " | ".join(cells) + " |")
    return lines + [""]


def build() -> str:
    study = load_rows(RESULTS / "recovery-study.csv")
    axes = load_rows(RESULTS / "recovery-axes.csv")
    lr1e3 = lr1e3_counts((RESULTS / "recovery-axes-lr1e-3-r50.md").read_text(encoding="utf-8"))
    parts = ["# Verdicts re-derived from the committed data (docs/design.md#statistics-protocol)\n",
             "## Headline: confirmation seeds\n"] + headline(study)
    parts += ["## Recovery study, first stage and confirmation (per seed: recovery-study.csv)\n"]
    parts += recovery_table(study)
    claims_csv = RESULTS / "offset-key-claims.csv"
    if claims_csv.is_file():
        doc = offset_key_report.from_csv(claims_csv.read_text(encoding="utf-8"), CLAIMS_BUDGET, str(claims_csv))
        parts += ["## Claims (a)–(f) on fresh seeds 2000–2009 (offset-key-claims.csv: per-seed values, paired tests)\n"]
        parts += [f"- {offset_key_report.Claim(**cl).line()}" for cl in doc["claims"]] + [""]
    parts += ["## Claims (a)–(f) on the 5-seed reproduction (summaries only: per-seed values not committed)\n"]
    parts += reproduction((RESULTS / "reproduce-5seeds-REPORT.md").read_text(encoding="utf-8"))
    parts += ["## Secondary claims of the recovery study (two-sided: stated after the data)\n",
              "| statement | verdict | test |", "|---|---|---|"]
    parts += [x.row() for x in secondary(study, axes, lr1e3)] + [""]
    parts += ["## Prose: DroPE's in-context perplexity gap (5 seeds, summaries)\n"]
    parts += prose((RESULTS / "prose-drop-study.md").read_text(encoding="utf-8"))
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    ap = cli.Parser("committed_verdicts", prog="studies/run.sh committed_verdicts",
                    description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=pathlib.Path, help="Also write the Markdown here (a file)")
    a = ap.parse_args(argv)
    out = ap.check(cli.out_file, cli.caller_path(a.out), "--out") if a.out else None
    text = build()
    print(text)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
