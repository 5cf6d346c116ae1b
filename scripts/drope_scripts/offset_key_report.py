"""The offset-key experiment's table over seeds and its verdicts: per method and length, accuracy and
far-needle accuracy over seeds (mean, an interval inside [0, 100]: the bootstrap over seeds widened to the Wilson
interval of the pooled query counts), claims (a)–(f) decided by the tests of the statistics protocol
(docs/design.md#statistics-protocol, stats.py), and the table as Markdown / CSV (results.{md,csv} of
offset_key.run, the reproduction report's section 5). The per-(method, seed) inputs are offset-key results files
(docs/formats.md); offset_key.py makes them."""
from __future__ import annotations

import csv
import io
import math
import pathlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from . import results, stats

KIND = "offset-key"
AGGREGATE_KIND = "offset-key-seeds"  # results.json: the table over seeds and the verdicts
CONFIDENCE = stats.CONFIDENCE
ALPHA = stats.ALPHA
# Method labels (rows, plot lines); eval-time scaling uses factor L/C, so at C a scaled method is plain RoPE.
ROPE, PI, NTK, YARN = "RoPE", "RoPE+PI", "RoPE+NTK", "RoPE+YaRN"
PI_T, NTK_T, YARN_T = "RoPE+PI+temp", "RoPE+NTK+temp", "RoPE+YaRN+temp"  # each with its own fitted temperature
CROP = "RoPE crop"  # RoPE reading only BOS + the last C − 1 tokens (docs/design.md#statistics-protocol)
NOPE_T, DROPE_T, DROPE_0 = "NoPE+temp", "DroPE+temp", "DroPE c=0"
SCALED = (PI, NTK, YARN)
SCALED_T = (PI_T, NTK_T, YARN_T)

# Margins of the claims (points of accuracy), fixed by the protocol.
COLLAPSE_MARGIN = 10.0  # (a): "collapse" = a fall of more than 10 points
CROP_MARGIN = 5.0  # (c): within 5 points of the cropped baseline
RECOVERY_MARGIN = 2.0  # (e): within 2 points of RoPE at C (the recovery study's per-seed tolerance)
# (b), (d), (f): "X beats Y" means by more than 2 points: the recovery study's per-seed tolerance, about the query
# noise of one seed's cell (the Wilson half-width of 1,000 queries at 90 % is 1.9 points).
BEATS_MARGIN = 2.0
CEILING = stats.CEILING  # a cell whose two sides both average >= 99.5 % is saturated, not testable
VALUES_PER_COLOUR = 16  # a colour's value is uniform over 16 tokens (tasks/offset_key)
CROP_BOUND = 100.0 / VALUES_PER_COLOUR  # any model's expected far accuracy when the needle is cropped away

CLAIMS = {
    "a": f"RoPE collapses beyond C on far needles (falls by more than {COLLAPSE_MARGIN:g} points)",
    "b": f"PI hurts at 2C (by more than {BEATS_MARGIN:g} points)",
    "c": "NTK and YaRN behave like cropping the context to C",
    "d": f"DroPE beats every RoPE-scaling method by more than {BEATS_MARGIN:g} points, with and without a fitted "
         "temperature, at 4C and 8C",
    "e": f"DroPE recovers RoPE's in-context accuracy (within {RECOVERY_MARGIN:g} points) with {{fraction}} of "
         "the budget",
    "f": f"the temperature matters at 4C and 8C (by more than {BEATS_MARGIN:g} points)",
}
CRITERIA = {
    "a": f"directional, paired t over seeds: d = acc(RoPE, C) − far(RoPE, L) > {COLLAPSE_MARGIN:g} at L = 4C and 8C",
    "b": f"directional, paired t: d = far(RoPE, 2C) − far(RoPE+PI, 2C) > {BEATS_MARGIN:g}",
    "c": f"equivalence, TOST (paired t): |far(X, L) − far(RoPE crop, L)| < {CROP_MARGIN:g} for X = NTK, YaRN and "
         f"L = 2C, 4C, 8C; without the measured crop a cell can only disagree, by the one-sample t test of "
         f"far(X, L) > {CROP_BOUND:g} + {CROP_MARGIN:g} (the crop's far accuracy is at most 100/16 = {CROP_BOUND:g} % "
         "for any model)",
    "d": f"directional, paired t: d = far(DroPE+temp, L) − far(X, L) > {BEATS_MARGIN:g} for X = PI, NTK, YaRN, each "
         "without and with its own fitted temperature, at L = 4C and 8C",
    "e": f"equivalence, TOST (paired t): |acc(DroPE+temp, C) − acc(RoPE, C)| < {RECOVERY_MARGIN:g}, DroPE having "
         "recalibrated for the stated fraction of RoPE's steps",
    "f": f"directional, paired t: d = far(DroPE+temp, L) − far(DroPE c=0, L) > {BEATS_MARGIN:g} at L = 4C and 8C",
}
RULES = (f"α = {ALPHA:g}. Each one-sided test at α / 2, so that at most α of verdicts are wrong: a claim's p is twice "
         "the smaller of its agree p (directional: the one-sided test in the claim's direction; equivalence: TOST; "
         "over several cells the largest, every cell must pass) and its disagree p (the opposite one-sided test, or "
         "for equivalence the one that puts the difference outside the margin; over k cells k × the smallest). The "
         "six claims' p are Holm-adjusted as one family; a claim agrees or disagrees, in the direction its p points, "
         f"when its Holm p < α, else it is inconclusive. A cell whose two sides both average ≥ {CEILING:g} % is "
         "saturated, not testable: it keeps its claim from agreeing (verdict 'saturated, not testable' when nothing "
         "else does). A cell not measured, or with one seed, is not tested. Paired t p-values are approximate for "
         "accuracies that are bimodal over seeds.")


def summary_of(rows: Sequence[dict]) -> dict:
    """acc@L per row, far@L where the row has far needles (what drope-eval offset-key writes)."""
    summary = {}
    for r in rows:
        summary[f"acc@{r['length']}"] = r["accuracy"]
        if r.get("far_accuracy") is not None:
            summary[f"far@{r['length']}"] = r["far_accuracy"]
    return summary


# ---- aggregation over seeds -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Cell:
    """One metric of one method at one length over seeds: the per-seed values (by seed) and the interval."""

    n: int
    mean: float
    low: float  # the protocol's interval, in [0, 100]
    high: float
    values: tuple[float, ...]
    seeds: tuple[int, ...]

    @staticmethod
    def of(d: dict | None) -> Cell | None:
        if d is None:
            return None
        seeds = d.get("seeds") or list(range(len(d["values"])))
        return Cell(d["n"], d["mean"], d["interval_low"], d["interval_high"], tuple(d["values"]), tuple(seeds))

    def text(self) -> str:
        if self.low == self.high == self.mean:
            return f"{self.mean:.1f}"
        return f"{self.mean:.1f} [{self.low:.1f}, {self.high:.1f}]"

    def by_seed(self) -> dict[int, float]:
        return dict(zip(self.seeds, self.values))


def summarize(values: Sequence[float]) -> dict:
    """stats.summarize as JSON: n, mean, std, the t interval's half_width and bounds (None with one seed), range,
    values. The t interval is for sizes that are not bounded accuracies (the recovery study's tables read it);
    cell() adds the accuracy interval."""
    s = stats.summarize(list(values), CONFIDENCE)
    one = s.n == 1
    return {"n": s.n, "mean": s.mean, "std": s.std, "half_width": None if one else (s.ci_high - s.ci_low) / 2,
            "ci_low": None if one else s.ci_low, "ci_high": None if one else s.ci_high, "min": s.min, "max": s.max,
            "values": [float(v) for v in values]}


def cell(values: Sequence[float], seeds: Sequence[int], counts: tuple[int, int] | None) -> dict:
    """summarize() plus the seeds and the protocol's interval: the bootstrap over seeds widened to the Wilson
    interval of the pooled counts (k, n) where the files carry them, clipped to [0, 100]."""
    d = summarize(values)
    lo, hi = stats.accuracy_interval(list(values), counts, CONFIDENCE)
    d.update({"seeds": [int(s) for s in seeds], "interval_low": lo, "interval_high": hi,
              "correct": None if counts is None else counts[0], "count": None if counts is None else counts[1]})
    return d


def train_length(doc: dict) -> int | None:
    """The training context a results file names (top level, or in "method")."""
    c = doc.get("train_length")
    if c is None and isinstance(doc.get("method"), dict):
        c = doc["method"].get("train_length")
    return c


COUNT_TOLERANCE = 0.05  # points: a file's counts must give its accuracy (drope-eval writes both from the same counts)


def _pooled(rows: Sequence[dict], paths: Sequence[pathlib.Path], metric: str, correct: str,
            total: str) -> tuple[int, int] | None:
    """Counts summed over seeds, or None when a file lacks them; refuses counts that contradict the accuracy."""
    if any(r.get(correct) is None or r.get(total) is None for r in rows):
        return None
    for r, p in zip(rows, paths):
        k, n = int(r[correct]), int(r[total])
        if n < 1 or not 0 <= k <= n or abs(100 * k / n - r[metric]) > COUNT_TOLERANCE:
            raise results.ResultsError(f"{p}: {correct} / {total} = {k} / {n} at length {r['length']} does not give "
                                       f"its {metric} {r[metric]}")
    return sum(int(r[correct]) for r in rows), sum(int(r[total]) for r in rows)


def aggregate(files: dict[str, list[pathlib.Path]], c: int, multipliers: Sequence[int],
              budget: tuple[int, int]) -> dict:
    """The table over seeds from one offset-key results file per (method, seed): per method and length, the
    accuracy and far accuracy over seeds (cell()), query counts summed; the claims decided on it.
    `budget` = (DroPE recalibration steps, RoPE steps). Every file must be at training length `c`; a length
    is either in every seed's file of a method or in none (then the cells are null). Seeds are read from the
    files ("seed"; else the position in the list) and pair the methods in the tests."""
    lengths = [m * c for m in multipliers]
    methods = []
    for label, paths in files.items():
        docs = [results.load(p, KIND) for p in paths]
        per_seed = []
        seeds = []
        for i, (p, doc) in enumerate(zip(paths, docs)):
            if train_length(doc) not in (None, c):
                raise results.ResultsError(f"{p}: train_length {train_length(doc)}, expected C = {c}")
            per_seed.append({r["length"]: r for r in doc.get("results", [])})
            seed = doc.get("seed", i)
            if seed in seeds:
                raise results.ResultsError(f"{p}: seed {seed} is already in another file of {label}")
            seeds.append(seed)
        cells = []
        for length in lengths:
            have = [length in rows for rows in per_seed]
            if not any(have):
                cells.append({"length": length, "accuracy": None, "far_accuracy": None, "queries": 0, "far_queries": 0})
                continue
            if not all(have):
                missing = paths[have.index(False)]
                raise results.ResultsError(f"{missing}: no result at length {length} (the other seeds of {label} "
                                           "have one)")
            rows = [r[length] for r in per_seed]
            for r, p in zip(rows, paths):
                for metric in ("accuracy", "far_accuracy"):
                    if r.get(metric) is not None and not 0.0 <= r[metric] <= 100.0:
                        raise results.ResultsError(f"{p}: {metric} {r[metric]} at length {length} is outside [0, 100]")
            far = [r.get("far_accuracy") for r in rows]
            cells.append({"length": length,
                          "accuracy": cell([r["accuracy"] for r in rows], seeds,
                                           _pooled(rows, paths, "accuracy", "correct", "queries")),
                          "far_accuracy": None if any(v is None for v in far) else cell(
                              far, seeds, _pooled(rows, paths, "far_accuracy", "far_correct", "far_queries")),
                          "queries": sum(r.get("queries", 0) for r in rows),
                          "far_queries": sum(r.get("far_queries", 0) for r in rows)})
        methods.append({"label": label, "seeds": len(docs), "seed_ids": seeds, "files": [str(p) for p in paths],
                        "cells": cells})
    doc = {"schema": results.SCHEMA, "schema_version": results.SCHEMA_VERSION, "kind": AGGREGATE_KIND,
           "train_length": c, "multipliers": list(multipliers), "lengths": lengths, "confidence": CONFIDENCE,
           "alpha": ALPHA, "budget": {"recalibration_steps": budget[0], "rope_steps": budget[1]}, "methods": methods}
    doc["claims"] = [asdict(cl) for cl in claims(doc)]
    return doc


# ---- claims -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    """A claim's verdict (stats.Verdict) with its letter, statement and criterion. `statistic` is a number, or
    'inf' / '-inf' (JSON has no infinities)."""

    letter: str
    what: str
    verdict: str  # agrees | disagrees | inconclusive
    test: str
    statistic: float | str | None
    p: float | None
    criterion: str
    detail: str
    p_claim: float | None = None  # the claim's p (twice its smaller side)
    p_holm: float | None = None  # after Holm over the six claims

    def line(self) -> str:
        return f"claim ({self.letter}) {self.what}: {self.verdict} ({self.test})"


class Table:
    """Cells of an aggregate document by method label and multiple of C."""

    def __init__(self, doc: dict):
        self.c = doc["train_length"]
        self.cells = {(m["label"], cell["length"]): cell for m in doc["methods"] for cell in m["cells"]}

    def get(self, label: str, mult: int, metric: str) -> Cell | None:
        cell = self.cells.get((label, mult * self.c))
        return Cell.of(cell[metric]) if cell else None

    def acc(self, label: str, mult: int = 1) -> Cell | None:
        return self.get(label, mult, "accuracy")

    def far(self, label: str, mult: int) -> Cell | None:
        return self.get(label, mult, "far_accuracy")


def where(mult: int) -> str:
    return "C" if mult == 1 else f"{mult}C"


def _missing(label: str, metric: str, mult: int) -> str:
    return f"{label} {'far accuracy' if metric == 'far' else 'accuracy'} at {where(mult)} was not measured"


def _paired(x: Cell, y: Cell) -> tuple[list[float], list[float]]:
    """The values of two cells on their common seeds, in seed order."""
    a, b = x.by_seed(), y.by_seed()
    common = sorted(set(a) & set(b))
    return [a[s] for s in common], [b[s] for s in common]


def _pair_cell(label: str, x: Cell | None, y: Cell | None, missing: str, make: Callable[..., stats.CellTest],
               **kw) -> stats.CellTest:
    """A cell comparing x with y paired by seed (make: stats.directional_cell or equivalence_cell); untested with
    the reason when one side was not measured."""
    if x is None or y is None:
        return stats.CellTest(label, why=missing)
    xs, ys = _paired(x, y)
    numbers = f"{x.text()} vs {y.text()}"
    if not xs:
        return stats.CellTest(label, why="no seed in common", numbers=numbers)
    return make(label, xs, ys, numbers=numbers, ceiling=CEILING, **kw)


def _first_missing(t: Table, needs: Sequence[tuple[str, str, int]]) -> str:
    for label, metric, mult in needs:
        if (t.acc(label, mult) if metric == "acc" else t.far(label, mult)) is None:
            return _missing(label, metric, mult)
    return ""


def _claim_a(t: Table) -> list[stats.CellTest]:
    out = []
    for mult in (4, 8):
        at_c, far = t.acc(ROPE), t.far(ROPE, mult)
        out.append(_pair_cell(f"RoPE C − {where(mult)}", at_c, far,
                              _first_missing(t, [(ROPE, "acc", 1), (ROPE, "far", mult)]), stats.directional_cell,
                              margin=COLLAPSE_MARGIN))
    return out


def _claim_b(t: Table) -> list[stats.CellTest]:
    return [_pair_cell("RoPE − PI at 2C", t.far(ROPE, 2), t.far(PI, 2),
                       _first_missing(t, [(ROPE, "far", 2), (PI, "far", 2)]), stats.directional_cell,
                       margin=BEATS_MARGIN)]


def _claim_c(t: Table) -> list[stats.CellTest]:
    out = []
    for x in (NTK, YARN):
        for mult in (2, 4, 8):
            label = f"{x} − crop at {where(mult)}"
            fx, crop = t.far(x, mult), t.far(CROP, mult)
            if fx is None:
                out.append(stats.CellTest(label, why=_missing(x, "far", mult)))
            elif crop is not None:
                out.append(_pair_cell(label, fx, crop, "", stats.equivalence_cell, margin=CROP_MARGIN))
            elif fx.n < 2:
                out.append(stats.CellTest(label, why="one seed: no test over seeds", numbers=fx.text()))
            else:
                bound = stats.one_sample_t(list(fx.values), CROP_BOUND + CROP_MARGIN, "greater")
                out.append(stats.CellTest(label, disagree=bound, what=f"mean far({x})",
                                          why=f"{CROP} not measured: can disagree (bound {CROP_BOUND:g} %), not agree",
                                          numbers=f"{x} {fx.text()}"))
    return out


def _claim_d(t: Table) -> list[stats.CellTest]:
    out = []
    for mult in (4, 8):
        for x in (*SCALED, *SCALED_T):
            out.append(_pair_cell(f"DroPE − {x.removeprefix('RoPE+')} at {where(mult)}", t.far(DROPE_T, mult),
                                  t.far(x, mult), _first_missing(t, [(DROPE_T, "far", mult), (x, "far", mult)]),
                                  stats.directional_cell, margin=BEATS_MARGIN))
    return out


def _claim_e(t: Table) -> list[stats.CellTest]:
    return [_pair_cell("DroPE − RoPE at C", t.acc(DROPE_T), t.acc(ROPE),
                       _first_missing(t, [(DROPE_T, "acc", 1), (ROPE, "acc", 1)]), stats.equivalence_cell,
                       margin=RECOVERY_MARGIN)]


def _claim_f(t: Table) -> list[stats.CellTest]:
    return [_pair_cell(f"DroPE temp − c=0 at {where(mult)}", t.far(DROPE_T, mult), t.far(DROPE_0, mult),
                       _first_missing(t, [(DROPE_T, "far", mult), (DROPE_0, "far", mult)]), stats.directional_cell,
                       margin=BEATS_MARGIN)
            for mult in (4, 8)]


DECIDE: dict[str, Callable[[Table], list[stats.CellTest]]] = {
    "a": _claim_a, "b": _claim_b, "c": _claim_c, "d": _claim_d, "e": _claim_e, "f": _claim_f}


def _json_number(x: float | None) -> float | str | None:
    if x is None or math.isfinite(x):
        return x
    return "inf" if x > 0 else "-inf" if x < 0 else None


def claims(doc: dict) -> list[Claim]:
    """The verdicts of claims (a)–(f) on an aggregate document (CRITERIA, stats.decide_family: Holm over the six)."""
    t = Table(doc)
    alpha = doc.get("alpha", ALPHA)
    verdicts = stats.decide_family([(letter, cells(t)) for letter, cells in DECIDE.items()], alpha)
    return [Claim(letter, CLAIMS[letter].format(fraction=fraction(doc)), v.verdict, v.test, _json_number(v.statistic),
                  v.p, CRITERIA[letter], v.detail, v.p_claim, v.p_holm)
            for letter, v in zip(DECIDE, verdicts)]


def fraction(doc: dict) -> str:
    """The recalibration's share of RoPE's training steps, e.g. '25 % (200 of 800 steps recalibrating)'."""
    b = doc["budget"]
    return (f"{100 * b['recalibration_steps'] / b['rope_steps']:.0f} % ({b['recalibration_steps']} of "
            f"{b['rope_steps']} steps recalibrating)")


# ---- tables -----------------------------------------------------------------------------------------------

def column(mult: int, c: int) -> str:
    return f"C = {c} (all)" if mult == 1 else f"{mult}C = {mult * c} (far)"


def markdown(doc: dict, where: str) -> str:
    """The table (rows: methods; at C accuracy, beyond C far-needle accuracy, mean [interval] over seeds), the
    plot's path under `where`, the claim lines with their deciding tests, and every claim's criterion and cells."""
    c, mults = doc["train_length"], doc["multipliers"]
    seeds = sorted({m["seeds"] for m in doc["methods"]})
    if seeds == [1]:
        over = ("1 seed: the value and, where the file has the query counts, their Wilson 95 % interval; no test "
                "over seeds, so every claim that compares methods is inconclusive")
    else:
        over = (f"{'/'.join(map(str, seeds))} seeds: mean over seeds [95 % interval: the bootstrap over seeds "
                "widened to the Wilson interval of the queries pooled over seeds, inside 0–100]")
    lines = [f"### Offset-key retrieval at C = {c}: accuracy at C, far-needle accuracy beyond C (%)\n",
             f"Far = the needle is more than C tokens before its query. {over}. Eval-time scaling uses factor L/C "
             "(at C it is plain RoPE: –). RoPE crop: RoPE reading only BOS and the last C − 1 tokens (at C, plain "
             "RoPE). +temp: a fitted temperature β = 1 + c·ln(L/C); c=0: none.\n",
             "| method | " + " | ".join(column(m, c) for m in mults) + " |",
             "|---|" + "---:|" * len(mults)]
    for m in doc["methods"]:
        cells = []
        for mult, cl in zip(mults, m["cells"]):
            value = cl["accuracy"] if mult == 1 else cl["far_accuracy"]
            cells.append("–" if value is None else Cell.of(value).text())
        n = m["seeds"]
        fewer = f" ({n} seed{'s' if n > 1 else ''})" if n < seeds[-1] else ""  # rows over fewer seeds say so
        lines.append(f"| {m['label']}{fewer} | " + " | ".join(cells) + " |")
    lines += [f"\nPlot: `{where}/far.png` (far-needle accuracy vs length; mean over seeds, band min–max).\n",
              f"<!-- {VERDICTS_SECTION}:begin -->", verdicts_md(doc), f"<!-- {VERDICTS_SECTION}:end -->"]
    return "\n".join(lines) + "\n"


VERDICTS_SECTION = "offset-key-verdicts"  # the markers around verdicts_md in a page (docs/results/offset-key-claims.md)


def verdicts_md(doc: dict) -> str:
    """The claim lines with their deciding tests, the rules, and every claim's criterion and cells."""
    lines = ["```"] + [Claim(**cl).line() for cl in doc["claims"]] + ["```\n",
             f"Tests (scripts/drope_scripts/offset_key_report.py; docs/design.md#statistics-protocol). {RULES}\n"]
    lines += [f"- ({cl['letter']}) {cl['criterion']}. {cl['detail']}." for cl in doc["claims"]]
    return "\n".join(lines)


def csv_text(doc: dict) -> str:
    """One row per method, length and metric (accuracy, far_accuracy)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = ("n", "mean", "std", "half_width", "ci_low", "ci_high", "min", "max", "interval_low", "interval_high",
            "correct", "count")
    w.writerow(("method", "length", "metric", *cols, "seeds", "values"))
    for m in doc["methods"]:
        for cl in m["cells"]:
            for metric in ("accuracy", "far_accuracy"):
                d = cl[metric]
                if d is not None:
                    w.writerow((m["label"], cl["length"], metric, *("" if d.get(k) is None else d[k] for k in cols),
                                " ".join(map(str, d.get("seeds", []))), " ".join(f"{v:g}" for v in d["values"])))
    return buf.getvalue()


def from_csv(text: str, budget: tuple[int, int], where: str = "offset-key CSV") -> dict:
    """The table of an aggregate document back from csv_text's rows (every cell with its per-seed values and
    seeds, so the paired tests can be redone from a committed CSV), with its claims decided again. `budget` =
    (DroPE recalibration steps, RoPE steps), which the CSV does not hold."""
    methods: dict[str, dict[int, dict]] = {}
    for i, row in enumerate(csv.DictReader(io.StringIO(text)), start=2):
        try:
            values = [float(v) for v in row["values"].split()]
            seeds = [int(v) for v in row["seeds"].split()]
            if row["metric"] not in ("accuracy", "far_accuracy") or len(values) != len(seeds) or not values:
                raise ValueError("metric, seeds and values")
            d = {"n": len(values), "mean": float(row["mean"]), "interval_low": float(row["interval_low"]),
                 "interval_high": float(row["interval_high"]), "values": values, "seeds": seeds}
            length = int(row["length"])
        except (KeyError, TypeError, ValueError) as e:
            raise results.ResultsError(f"{where}: line {i}: not a row of the offset-key table ({e})") from None
        cells = methods.setdefault(row["method"], {})
        cells.setdefault(length, {"length": length, "accuracy": None, "far_accuracy": None})[row["metric"]] = d
    if not methods:
        raise results.ResultsError(f"{where}: no rows")
    lengths = sorted({L for cells in methods.values() for L in cells})
    doc = {"train_length": lengths[0], "lengths": lengths,
           "budget": {"recalibration_steps": budget[0], "rope_steps": budget[1]},
           "methods": [{"label": label, "cells": [cells[L] for L in sorted(cells)]}
                       for label, cells in methods.items()]}
    doc["claims"] = [asdict(cl) for cl in claims(doc)]
    return doc
