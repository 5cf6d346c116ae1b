"""The offset-key experiment's table over seeds and its verdicts: per method and length, accuracy and
far-needle accuracy over seeds (mean, 95 % t interval: stats.py), claims (a)–(f) decided from those numbers by
the criteria below (never tuned), and the table as Markdown / CSV (results.{md,csv} of offset_key.run, the
reproduction report's section 5). The per-(method, seed) inputs are offset-key results files
(docs/formats.md); offset_key.py makes them."""
from __future__ import annotations

import csv
import io
import pathlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from . import results, stats

KIND = "offset-key"
AGGREGATE_KIND = "offset-key-seeds"  # results.json: the table over seeds and the verdicts
CONFIDENCE = 0.95
# With one seed there is no interval: a difference the criteria ask to be clear must exceed this (points).
SINGLE_SEED_MARGIN = 2.0
# Method labels (rows, plot lines); eval-time scaling uses factor L/C, so at C a scaled method is plain RoPE.
ROPE, PI, NTK, YARN = "RoPE", "RoPE+PI", "RoPE+NTK", "RoPE+YaRN"
NOPE_T, DROPE_T, DROPE_0 = "NoPE+temp", "DroPE+temp", "DroPE c=0"
SCALED = (PI, NTK, YARN)

# The experiment's claims and how each is decided. "clearly below" = below by more than the sum of both 95 %
# interval half-widths (the intervals do not overlap), or by more than SINGLE_SEED_MARGIN with one seed. far(m, L):
# mean far-needle accuracy of method m at length L; acc(m, C): mean accuracy at C. A claim whose cells were not
# measured (method not run, no far needles) is inconclusive; otherwise it agrees or disagrees.
CLAIMS = {
    "a": "RoPE collapses beyond C on far needles",
    "b": "PI hurts",
    "c": "NTK / YaRN hold partly",
    "d": "DroPE >= every RoPE-scaling method at 4C and 8C",
    "e": "DroPE recovers RoPE's in-context accuracy with {fraction} of the budget",
    "f": "the temperature matters",
}
CRITERIA = {
    "a": "RoPE's far accuracy at 4C and at 8C is clearly below RoPE's accuracy at C",
    "b": "far(RoPE+PI, 2C) < far(RoPE, 2C) (means)",
    "c": "for NTK and for YaRN: far(RoPE, 4C) < far(X, 4C) < acc(RoPE, C) (means; at C every scaled method is RoPE)",
    "d": "far(DroPE+temp, L) >= far(X, L) for X in PI, NTK, YaRN and L in 4C, 8C (means; differences within the "
         "intervals are named as ties)",
    "e": f"acc(DroPE+temp, C) >= acc(RoPE, C) minus RoPE's interval half-width (minus {SINGLE_SEED_MARGIN:g} points "
         "with one seed), DroPE having recalibrated for the stated fraction of RoPE's steps",
    "f": "far(DroPE+temp, L) > far(DroPE c=0, L) at 4C and at 8C (means)",
}


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
    """One metric of one method at one length over seeds."""

    n: int
    mean: float
    half: float | None  # 95 % t interval half-width; None with one seed

    @staticmethod
    def of(d: dict | None) -> Cell | None:
        return None if d is None else Cell(d["n"], d["mean"], d["half_width"])

    def text(self) -> str:
        return f"{self.mean:.1f}" if self.half is None else f"{self.mean:.1f} ± {self.half:.1f}"


def summarize(values: Sequence[float]) -> dict:
    """stats.summarize as JSON: n, mean, std, half_width and the interval (None with one seed), range, values."""
    s = stats.summarize(list(values), CONFIDENCE)
    one = s.n == 1
    return {"n": s.n, "mean": s.mean, "std": s.std, "half_width": None if one else (s.ci_high - s.ci_low) / 2,
            "ci_low": None if one else s.ci_low, "ci_high": None if one else s.ci_high, "min": s.min, "max": s.max,
            "values": [float(v) for v in values]}


def train_length(doc: dict) -> int | None:
    """The training context a results file names (top level, or in "method")."""
    c = doc.get("train_length")
    if c is None and isinstance(doc.get("method"), dict):
        c = doc["method"].get("train_length")
    return c


def aggregate(files: dict[str, list[pathlib.Path]], c: int, multipliers: Sequence[int],
              budget: tuple[int, int]) -> dict:
    """The table over seeds from one offset-key results file per (method, seed): per method and length, the
    accuracy and far accuracy over seeds (summarize), query counts summed; the claims decided on it.
    `budget` = (DroPE recalibration steps, RoPE steps). Every file must be at training length `c`; a length
    is either in every seed's file of a method or in none (then the cells are null)."""
    lengths = [m * c for m in multipliers]
    methods = []
    for label, paths in files.items():
        docs = [results.load(p, KIND) for p in paths]
        per_seed = []
        for p, doc in zip(paths, docs):
            if train_length(doc) not in (None, c):
                raise results.ResultsError(f"{p}: train_length {train_length(doc)}, expected C = {c}")
            per_seed.append({r["length"]: r for r in doc.get("results", [])})
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
            far = [r.get("far_accuracy") for r in rows]
            cells.append({"length": length, "accuracy": summarize([r["accuracy"] for r in rows]),
                          "far_accuracy": None if any(v is None for v in far) else summarize(far),
                          "queries": sum(r.get("queries", 0) for r in rows),
                          "far_queries": sum(r.get("far_queries", 0) for r in rows)})
        methods.append({"label": label, "seeds": len(docs), "files": [str(p) for p in paths], "cells": cells})
    doc = {"schema": results.SCHEMA, "schema_version": results.SCHEMA_VERSION, "kind": AGGREGATE_KIND,
           "train_length": c, "multipliers": list(multipliers), "lengths": lengths, "confidence": CONFIDENCE,
           "budget": {"recalibration_steps": budget[0], "rope_steps": budget[1]}, "methods": methods}
    doc["claims"] = [asdict(cl) for cl in claims(doc)]
    return doc


# ---- claims -----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    letter: str
    what: str
    verdict: str  # agrees | disagrees | inconclusive
    criterion: str
    evidence: str

    def line(self) -> str:
        return f"claim ({self.letter}) {self.what}: {self.verdict}"


class Missing(Exception):
    """A cell a criterion needs was not measured."""


class Table:
    """Cells of an aggregate document by method label and multiple of C."""

    def __init__(self, doc: dict):
        self.c = doc["train_length"]
        self.cells = {(m["label"], cell["length"]): cell for m in doc["methods"] for cell in m["cells"]}

    def get(self, label: str, mult: int, metric: str) -> Cell:
        cell = self.cells.get((label, mult * self.c))
        value = Cell.of(cell[metric]) if cell else None
        if value is None:
            where = "C" if mult == 1 else f"{mult}C"
            raise Missing(f"{label} {'far accuracy' if metric == 'far_accuracy' else 'accuracy'} at {where} "
                          "was not measured")
        return value

    def acc(self, label: str, mult: int = 1) -> Cell:
        return self.get(label, mult, "accuracy")

    def far(self, label: str, mult: int) -> Cell:
        return self.get(label, mult, "far_accuracy")


def margin(x: Cell, y: Cell) -> float:
    """How far apart two means must be to differ clearly: the sum of the half-widths (the intervals do not
    overlap), or SINGLE_SEED_MARGIN when either has one seed."""
    if x.half is None or y.half is None:
        return SINGLE_SEED_MARGIN
    return x.half + y.half


def clearly_below(x: Cell, y: Cell) -> bool:
    return x.mean < y.mean - margin(x, y)


def fraction(doc: dict) -> str:
    """The recalibration's share of RoPE's training steps, e.g. '25 % (200 of 800 steps recalibrating)'."""
    b = doc["budget"]
    return (f"{100 * b['recalibration_steps'] / b['rope_steps']:.0f} % ({b['recalibration_steps']} of "
            f"{b['rope_steps']} steps recalibrating)")


def _claim_a(t: Table) -> tuple[bool, str]:
    at_c, f4, f8 = t.acc(ROPE), t.far(ROPE, 4), t.far(ROPE, 8)
    ok = clearly_below(f4, at_c) and clearly_below(f8, at_c)
    return ok, f"RoPE accuracy at C {at_c.text()}; far accuracy at 4C {f4.text()}, at 8C {f8.text()}"


def _claim_b(t: Table) -> tuple[bool, str]:
    pi, rope = t.far(PI, 2), t.far(ROPE, 2)
    return pi.mean < rope.mean, f"far accuracy at 2C: RoPE+PI {pi.text()}, RoPE {rope.text()}"


def _claim_c(t: Table) -> tuple[bool, str]:
    rope4, at_c = t.far(ROPE, 4), t.acc(ROPE)
    xs = {x: t.far(x, 4) for x in (NTK, YARN)}
    ok = all(rope4.mean < v.mean < at_c.mean for v in xs.values())
    return ok, ("far accuracy at 4C: " + ", ".join(f"{x} {v.text()}" for x, v in xs.items()) +
                f", RoPE {rope4.text()}; RoPE accuracy at C {at_c.text()}")


def _claim_d(t: Table) -> tuple[bool, str]:
    ok, parts = True, []
    for mult in (4, 8):
        dr = t.far(DROPE_T, mult)
        cmp = []
        for x in SCALED:
            v = t.far(x, mult)
            ok &= dr.mean >= v.mean
            tie = " (tie within the intervals)" if abs(dr.mean - v.mean) <= margin(dr, v) else ""
            cmp.append(f"{x} {v.text()}{tie}")
        parts.append(f"{mult}C: DroPE+temp {dr.text()} vs " + ", ".join(cmp))
    return ok, "far accuracy at " + "; ".join(parts)


def _claim_e(t: Table) -> tuple[bool, str]:
    dr, rope = t.acc(DROPE_T), t.acc(ROPE)
    allowed = SINGLE_SEED_MARGIN if rope.half is None or dr.half is None else rope.half
    return dr.mean >= rope.mean - allowed, (f"accuracy at C: DroPE+temp {dr.text()}, RoPE {rope.text()} "
                                            f"(allowed shortfall {allowed:.1f})")


def _claim_f(t: Table) -> tuple[bool, str]:
    parts, ok = [], True
    for mult in (4, 8):
        with_t, without = t.far(DROPE_T, mult), t.far(DROPE_0, mult)
        ok &= with_t.mean > without.mean
        parts.append(f"{mult}C: DroPE+temp {with_t.text()}, DroPE c=0 {without.text()}")
    return ok, "far accuracy at " + "; ".join(parts)


DECIDE: dict[str, Callable[[Table], tuple[bool, str]]] = {
    "a": _claim_a, "b": _claim_b, "c": _claim_c, "d": _claim_d, "e": _claim_e, "f": _claim_f}


def claims(doc: dict) -> list[Claim]:
    """The verdicts of claims (a)–(f) on an aggregate document (CRITERIA)."""
    t = Table(doc)
    out = []
    for letter, decide in DECIDE.items():
        what = CLAIMS[letter].format(fraction=fraction(doc))
        try:
            ok, evidence = decide(t)
            verdict = "agrees" if ok else "disagrees"
        except Missing as e:
            verdict, evidence = "inconclusive", str(e)
        out.append(Claim(letter, what, verdict, CRITERIA[letter], evidence))
    return out


# ---- tables -----------------------------------------------------------------------------------------------

def column(mult: int, c: int) -> str:
    return f"C = {c} (all)" if mult == 1 else f"{mult}C = {mult * c} (far)"


def markdown(doc: dict, where: str) -> str:
    """The table (rows: methods; at C accuracy, beyond C far-needle accuracy, mean ± 95 % half-width over
    seeds), the plot's path under `where`, the claim lines and their criteria with the numbers."""
    c, mults = doc["train_length"], doc["multipliers"]
    seeds = sorted({m["seeds"] for m in doc["methods"]})
    if seeds == [1]:
        over = ("1 seed: no confidence interval; where a criterion asks for a clear difference it must exceed "
                f"{SINGLE_SEED_MARGIN:g} points")
    else:
        over = (f"{'/'.join(map(str, seeds))} seeds: mean ± half-width of the {100 * doc['confidence']:.0f} % t "
                "interval of the mean")
    lines = [f"### Offset-key retrieval at C = {c}: accuracy at C, far-needle accuracy beyond C (%)\n",
             f"Far = the needle is more than C tokens before its query. {over}. Eval-time scaling uses factor L/C "
             "(at C it is plain RoPE: –). +temp: the fitted temperature β = 1 + c·ln(L/C); c=0: none.\n",
             "| method | " + " | ".join(column(m, c) for m in mults) + " |",
             "|---|" + "---:|" * len(mults)]
    for m in doc["methods"]:
        cells = []
        for mult, cell in zip(mults, m["cells"]):
            value = cell["accuracy"] if mult == 1 else cell["far_accuracy"]
            cells.append("–" if value is None else Cell.of(value).text())
        n = m["seeds"]
        fewer = f" ({n} seed{'s' if n > 1 else ''})" if n < seeds[-1] else ""  # rows over fewer seeds say so
        lines.append(f"| {m['label']}{fewer} | " + " | ".join(cells) + " |")
    lines += [f"\nPlot: `{where}/far.png` (far-needle accuracy vs length; mean over seeds, band min–max).\n",
              "```"] + [Claim(**cl).line() for cl in doc["claims"]] + ["```\n",
              "Criteria (decided from the numbers by scripts/drope_scripts/offset_key_report.py; "
              "\"clearly below\" = below by more than the sum of both interval half-widths, i.e. the intervals "
              "do not overlap; with one seed "
              f"by more than {SINGLE_SEED_MARGIN:g} points):\n"]
    lines += [f"- ({cl['letter']}) {cl['criterion']}: {cl['evidence']}." for cl in doc["claims"]]
    return "\n".join(lines) + "\n"


def csv_text(doc: dict) -> str:
    """One row per method, length and metric (accuracy, far_accuracy)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = ("n", "mean", "std", "half_width", "ci_low", "ci_high", "min", "max")
    w.writerow(("method", "length", "metric", *cols))
    for m in doc["methods"]:
        for cell in m["cells"]:
            for metric in ("accuracy", "far_accuracy"):
                if cell[metric] is not None:
                    w.writerow((m["label"], cell["length"], metric,
                                *("" if cell[metric][k] is None else cell[metric][k] for k in cols)))
    return buf.getvalue()
