"""Statistics of the studies (docs/design.md#statistics-protocol): intervals that stay in [0, 100], the paired
tests between methods, Fisher's exact test on recovery counts, TOST equivalence, and the verdict rules that turn
them into agrees / disagrees / inconclusive. The t-interval summary of a small sample stays for quantities that are
not bounded accuracies (perplexities and their ratios)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np


def _scipy(name: str):
    """scipy.stats or scipy.special, imported at first use: importing scipy.stats takes about 2 s, which every
    study's argument check and doc renderer would pay before refusing a mistyped flag."""
    import importlib

    return importlib.import_module(f"scipy.{name}")


ALPHA = 0.05
CONFIDENCE = 0.95
BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0
AGREES, DISAGREES, INCONCLUSIVE = "agrees", "disagrees", "inconclusive"
ALTERNATIVES = ("two-sided", "greater", "less")


# ---- summaries ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Summary:
    """n, mean, sample std (ddof 1; 0 for one value), two-sided t interval of the mean (nan for one value), range."""

    n: int
    mean: float
    std: float
    ci_low: float
    ci_high: float
    min: float
    max: float


def t_quantile(p: float, dof: float) -> float:
    """The p quantile of Student's t distribution with `dof` degrees of freedom."""
    return float(_scipy("stats").t.ppf(p, dof))


def summarize(values: Sequence[float], confidence: float = CONFIDENCE) -> Summary:
    """Mean, std and the `confidence` t interval of the mean of `values` (at least one)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("summarize: no values")
    mean = float(x.mean())
    if x.size == 1:
        return Summary(1, mean, 0.0, math.nan, math.nan, mean, mean)
    std = float(x.std(ddof=1))
    half = t_quantile(0.5 + confidence / 2, x.size - 1) * std / math.sqrt(x.size)
    return Summary(int(x.size), mean, std, mean - half, mean + half, float(x.min()), float(x.max()))


# ---- intervals ----------------------------------------------------------------------------------------------

def clip(low: float, high: float, lo: float = 0.0, hi: float = 100.0) -> tuple[float, float]:
    """An interval cut to [lo, hi] (accuracies in percent by default)."""
    return min(max(low, lo), hi), max(min(high, hi), lo)


def wilson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Wilson score interval of the proportion k/n, without continuity correction, in [0, 1] (Newcombe's form:
    scipy's binomtest(k, n).proportion_ci(method="wilson"))."""
    if n < 1 or not 0 <= k <= n or int(k) != k or int(n) != n:
        raise ValueError(f"wilson: need integers 0 <= k <= n and n >= 1, got k={k}, n={n}")
    if not 0 < confidence < 1:
        raise ValueError(f"wilson: confidence must be in (0, 1), got {confidence}")
    z = float(_scipy("special").ndtri(0.5 + 0.5 * confidence))
    p = k / n
    denom = 2 * (n + z ** 2)
    centre = (2 * n * p + z ** 2) / denom
    delta = z / denom * math.sqrt(4 * n * p * (1 - p) + z ** 2)
    low = 0.0 if k == 0 else centre - delta
    high = 1.0 if k == n else centre + delta
    return max(0.0, low), min(1.0, high)


def wilson_percent(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """wilson() in percent."""
    lo, hi = wilson(k, n, confidence)
    return clip(100 * lo, 100 * hi)


def bootstrap_mean(values: Sequence[float], confidence: float = CONFIDENCE, resamples: int = BOOTSTRAP_RESAMPLES,
                   seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean: `resamples` resamples of the values with replacement from
    numpy's default_rng(seed), the (1 ∓ confidence) / 2 quantiles of their means. Inside [min, max]; one value
    gives a point."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("bootstrap_mean: no values")
    if x.size == 1 or np.all(x == x[0]):
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - confidence) / 2, (1 + confidence) / 2])
    return float(max(lo, x.min())), float(min(hi, x.max()))


def accuracy_interval(values: Sequence[float], counts: tuple[int, int] | None = None,
                      confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The interval of a table cell of accuracies (percent) over seeds: the bootstrap interval of the mean over
    seeds widened to contain the Wilson interval of the counts (k, n) pooled over seeds, clipped to [0, 100]. With
    one seed the Wilson interval alone (the value itself when there are no counts)."""
    if len(values) == 0:
        raise ValueError("accuracy_interval: no values")
    lo, hi = bootstrap_mean(values, confidence)
    if counts is not None:
        wlo, whi = wilson_percent(*counts, confidence)
        lo, hi = (wlo, whi) if len(values) == 1 else (min(lo, wlo), max(hi, whi))
    return clip(lo, hi)


# ---- tests --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TestResult:
    """One hypothesis test: what it is, its alternative against `null` (a margin or a constant), the statistic
    (t, or the odds ratio for Fisher), its p-value, degrees of freedom, sample size and the estimate (a mean
    difference, or an odds ratio)."""

    test: str
    alternative: str  # greater | less | two-sided | equivalence
    null: float
    statistic: float
    p: float
    df: float | None
    n: int
    estimate: float

    def hypothesis(self, what: str = "mean d") -> str:
        if self.alternative == "equivalence":
            return f"H1: |{what}| < {self.null:g}"
        sign = {"greater": ">", "less": "<", "two-sided": "≠"}[self.alternative]
        return f"H1: {what} {sign} {self.null:g}"

    def text(self, what: str = "mean d") -> str:
        """e.g. 'paired t, H1: mean d > 0, t(4) = 3.10, p = 0.018'."""
        if self.test.startswith("Fisher"):
            stat = f"odds ratio {fmt_stat(self.statistic)}"
        else:
            dof = "" if self.df is None else f"({self.df:.3g})"
            stat = f"t{dof} = {fmt_stat(self.statistic)}"
        return f"{self.test}, {self.hypothesis(what)}, {stat}, {p_text(self.p)}"


def fmt_p(p: float) -> str:
    """A p-value for a report: 3 significant digits, scientific below 0.001, '< 1e-300' for 0."""
    if math.isnan(p):
        return "nan"
    if p == 0:
        return "< 1e-300"
    return f"{p:.2e}" if p < 1e-3 else f"{p:.3g}"


def p_text(p: float) -> str:
    """'p = 0.0123', or 'p < 1e-300' for a p-value of 0 (a test without spread)."""
    return "p < 1e-300" if p == 0 else f"p = {fmt_p(p)}"


def fmt_stat(x: float) -> str:
    return "∞" if x == math.inf else "−∞" if x == -math.inf else "nan" if math.isnan(x) else f"{x:.3g}"


def _check_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(ALTERNATIVES)}, got '{alternative}'")


def _t_p(t: float, df: float, alternative: str) -> float:
    """The p-value of a t statistic (scipy's convention for the two-sided one)."""
    if math.isnan(t):
        return math.nan
    if alternative == "greater":
        return float(_scipy("stats").t.sf(t, df))
    if alternative == "less":
        return float(_scipy("stats").t.cdf(t, df))
    t_dist = _scipy("stats").t
    return float(min(1.0, 2 * min(t_dist.cdf(t, df), t_dist.sf(t, df))))


def _t_test(name: str, d: np.ndarray, popmean: float, alternative: str) -> TestResult:
    _check_alternative(alternative)
    n = int(d.size)
    if n < 2:
        raise ValueError(f"{name}: needs at least 2 values, got {n}")
    mean = float(np.mean(d))
    var = float(np.var(d, ddof=1))
    df = n - 1
    if var == 0.0:
        # No spread: the difference is known exactly. Beyond the null value the test passes in that direction
        # (t = ±inf, as scipy); exactly at it neither side has evidence (p = 1; scipy gives nan).
        if mean == popmean:
            return TestResult(name, alternative, popmean, 0.0, 1.0, df, n, mean)
        t = math.copysign(math.inf, mean - popmean)
    else:
        t = (mean - popmean) / math.sqrt(var / n)
    return TestResult(name, alternative, popmean, t, _t_p(t, df, alternative), df, n, mean)


def one_sample_t(x: Sequence[float], popmean: float = 0.0, alternative: str = "two-sided") -> TestResult:
    """One-sample t test of mean(x) against `popmean` (scipy.stats.ttest_1samp)."""
    return _t_test("one-sample t", np.asarray(x, dtype=np.float64), popmean, alternative)


def paired_t(x: Sequence[float], y: Sequence[float], alternative: str = "two-sided",
             margin: float = 0.0) -> TestResult:
    """Paired t test of d = x − y over seeds against `margin` (scipy.stats.ttest_rel for margin 0; otherwise
    ttest_1samp(x − y, margin)). alternative 'greater': H1 mean d > margin."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"paired_t: {a.size} values against {b.size}: the samples must be paired")
    return _t_test("paired t", a - b, margin, alternative)


def tost_paired(x: Sequence[float], y: Sequence[float], margin: float) -> tuple[TestResult, TestResult, TestResult]:
    """TOST equivalence of x and y within ±margin, paired: the one-sided tests H1: mean d > −margin (lower) and
    H1: mean d < margin (upper); returns (TOST, lower, upper). TOST's p is the larger of the two, its statistic
    that test's t."""
    if margin <= 0:
        raise ValueError(f"tost_paired: the margin must be > 0, got {margin}")
    lower = paired_t(x, y, "greater", -margin)
    upper = paired_t(x, y, "less", margin)
    worst = lower if lower.p >= upper.p else upper
    tost = TestResult("TOST (paired t)", "equivalence", margin, worst.statistic, max(lower.p, upper.p), worst.df,
                      worst.n, worst.estimate)
    return tost, lower, upper


def sd_from_half_width(half_width: float, n: int, confidence: float = CONFIDENCE) -> float:
    """The sample std behind a t-interval half-width of the mean over n values."""
    if n < 2:
        raise ValueError(f"sd_from_half_width: needs n >= 2, got {n}")
    return half_width * math.sqrt(n) / t_quantile(0.5 + confidence / 2, n - 1)


def one_sample_t_from_summary(mean: float, sd: float, n: int, popmean: float = 0.0,
                              alternative: str = "two-sided") -> TestResult:
    """one_sample_t from a summary (mean, sample std, n) instead of the values: the same statistic."""
    _check_alternative(alternative)
    if n < 2:
        raise ValueError(f"one-sample t: needs n >= 2, got {n}")
    if sd == 0:
        if mean == popmean:
            return TestResult("one-sample t (from summary)", alternative, popmean, 0.0, 1.0, n - 1, n, mean)
        t = math.copysign(math.inf, mean - popmean)
    else:
        t = (mean - popmean) / (sd / math.sqrt(n))
    return TestResult("one-sample t (from summary)", alternative, popmean, t, _t_p(t, n - 1, alternative), n - 1, n,
                      mean)


def welch_t_from_summary(mean1: float, sd1: float, n1: int, mean2: float, sd2: float, n2: int,
                         alternative: str = "two-sided", margin: float = 0.0) -> TestResult:
    """Welch's unpaired t test of mean1 − mean2 against `margin` from two summaries (scipy's
    ttest_ind_from_stats(equal_var=False) for margin 0). For committed tables without per-seed values."""
    _check_alternative(alternative)
    if n1 < 2 or n2 < 2:
        raise ValueError(f"Welch t: needs n >= 2 in both samples, got {n1} and {n2}")
    v1, v2 = sd1 ** 2 / n1, sd2 ** 2 / n2
    diff = mean1 - mean2
    if v1 + v2 == 0:
        if diff == margin:
            return TestResult("Welch t (from summaries)", alternative, margin, 0.0, 1.0, None, n1 + n2, diff)
        t, df = math.copysign(math.inf, diff - margin), float(n1 + n2 - 2)
    else:
        t = (diff - margin) / math.sqrt(v1 + v2)
        df = (v1 + v2) ** 2 / ((v1 ** 2 / (n1 - 1) if v1 else 0.0) + (v2 ** 2 / (n2 - 1) if v2 else 0.0))
    return TestResult("Welch t (from summaries)", alternative, margin, t, _t_p(t, df, alternative), df, n1 + n2,
                      diff)


def tost_welch_from_summary(mean1: float, sd1: float, n1: int, mean2: float, sd2: float, n2: int,
                            margin: float) -> tuple[TestResult, TestResult, TestResult]:
    """TOST equivalence of two summaries within ±margin by Welch's unpaired t (for committed tables without
    per-seed values): H1: mean1 − mean2 > −margin (lower) and H1: mean1 − mean2 < margin (upper); returns (TOST,
    lower, upper), TOST's p the larger of the two, as tost_paired."""
    if margin <= 0:
        raise ValueError(f"tost_welch_from_summary: the margin must be > 0, got {margin}")
    lower = welch_t_from_summary(mean1, sd1, n1, mean2, sd2, n2, "greater", -margin)
    upper = welch_t_from_summary(mean1, sd1, n1, mean2, sd2, n2, "less", margin)
    worst = lower if lower.p >= upper.p else upper
    tost = TestResult("TOST (Welch t, from summaries)", "equivalence", margin, worst.statistic,
                      max(lower.p, upper.p), worst.df, worst.n, worst.estimate)
    return tost, lower, upper


def fisher_exact(k1: int, n1: int, k2: int, n2: int, alternative: str = "two-sided") -> TestResult:
    """Fisher's exact test of the 2 × 2 table [[k1, n1 − k1], [k2, n2 − k2]] (successes / failures of two
    groups), computed exactly with integer binomials (scipy.stats.fisher_exact). 'greater': group 1's odds are
    higher. statistic = the sample odds ratio (inf when a failure or group-2 success count is 0, nan when a row or
    column is empty); p = 1 for an empty row or column."""
    _check_alternative(alternative)
    for k, n in ((k1, n1), (k2, n2)):
        if n < 1 or not 0 <= k <= n:
            raise ValueError(f"fisher_exact: need 0 <= k <= n and n >= 1, got k={k}, n={n}")
    f1, f2 = n1 - k1, n2 - k2
    est = fisher_odds(k1, f1, k2, f2)
    total, successes = n1 + n2, k1 + k2
    if successes in (0, total):
        return TestResult("Fisher exact", alternative, 1.0, math.nan, 1.0, None, total, math.nan)
    lo, hi = max(0, successes - n2), min(successes, n1)
    weights = {x: math.comb(n1, x) * math.comb(n2, successes - x) for x in range(lo, hi + 1)}
    denom = math.comb(total, successes)
    if alternative == "greater":
        num = sum(w for x, w in weights.items() if x >= k1)
    elif alternative == "less":
        num = sum(w for x, w in weights.items() if x <= k1)
    else:
        num = sum(w for w in weights.values() if w <= weights[k1])
    p = min(1.0, float(Fraction(num, denom)))
    return TestResult("Fisher exact", alternative, 1.0, est, p, None, total, est)


def fisher_odds(a: int, b: int, c: int, d: int) -> float:
    """The sample odds ratio a·d / (b·c) of [[a, b], [c, d]], as scipy reports it."""
    if b > 0 and c > 0:
        return a * d / (b * c)
    return math.inf


# ---- verdicts -----------------------------------------------------------------------------------------------

CEILING = 99.5  # percent: a cell whose two sides both average at least this is saturated, not testable
SATURATED = "saturated, not testable"


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (nan stays nan and does not count)."""
    idx = sorted((p, i) for i, p in enumerate(pvalues) if not math.isnan(p))
    m, out, running = len(idx), [math.nan] * len(pvalues), 0.0
    for k, (p, i) in enumerate(idx):
        running = max(running, min(1.0, (m - k) * p))
        out[i] = running
    return out


@dataclass(frozen=True)
class Verdict:
    """A claim's verdict and the test behind it (docs/design.md#statistics-protocol). `p` is the deciding one-sided
    test's p; `p_claim` the claim's own p (twice the smaller of its agree and disagree p: each side at α / 2);
    `p_holm` the claim's p after Holm over the study's claims (None when it was decided alone)."""

    claim: str
    verdict: str  # agrees | disagrees | inconclusive | saturated, not testable
    test: str  # the deciding test, its hypothesis and p, or why there is none
    statistic: float | None
    p: float | None
    detail: str  # every cell's test and numbers
    p_claim: float | None = None
    p_holm: float | None = None

    def line(self) -> str:
        return f"{self.claim}: {self.verdict} ({self.test})"


@dataclass(frozen=True)
class CellTest:
    """One cell of a claim: the test whose passing agrees, the one whose passing disagrees, and a label / what
    the difference is. `agree`/`disagree` None: not measured, not testable (`why`) or `saturated` (both sides at
    the ceiling)."""

    label: str
    agree: TestResult | None = None
    disagree: TestResult | None = None
    what: str = "mean d"
    why: str = ""  # why there is no test (not measured, one seed, saturated)
    numbers: str = ""  # the cell's numbers for the detail
    saturated: bool = False

    def text(self, alpha: float = ALPHA) -> str:
        head = f"{self.label}: " + (f"{self.numbers}; " if self.numbers else "")
        if self.agree is None and self.disagree is None:
            return head + (self.why or "no test")
        parts = []
        if self.agree is not None:
            parts.append(self.agree.text(self.what))
            if self.disagree is not None:
                parts.append(f"against it {self.disagree.hypothesis(self.what)}: {p_text(self.disagree.p)}")
        elif self.disagree is not None:
            parts.append(self.disagree.text(self.what))
        return head + "; ".join(parts + ([self.why] if self.why else []))


def at_ceiling(x: Sequence[float], y: Sequence[float], ceiling: float | None) -> bool:
    """Both sides' means at or above `ceiling` (None: no ceiling, e.g. perplexities)."""
    return ceiling is not None and float(np.mean(x)) >= ceiling and float(np.mean(y)) >= ceiling


def saturated_cell(label: str, what: str = "mean d", numbers: str = "", ceiling: float = CEILING) -> CellTest:
    """A cell at the ceiling: no test either way (a difference there is bounded by the ceiling's headroom)."""
    return CellTest(label, what=what, why=f"{SATURATED}: both sides ≥ {ceiling:g} %", numbers=numbers, saturated=True)


def directional_cell(label: str, x: Sequence[float], y: Sequence[float], margin: float = 0.0,
                     what: str = "mean d", numbers: str = "", ceiling: float | None = None) -> CellTest:
    """Directional claim 'x exceeds y by more than margin', paired over seeds: agree test H1: mean(x − y) >
    margin, disagree test H1: mean(x − y) < margin. Saturated (no test) when both means are ≥ `ceiling`."""
    if len(x) < 2:
        return CellTest(label, what=what, why="one seed: no test over seeds", numbers=numbers)
    if at_ceiling(x, y, ceiling):
        return saturated_cell(label, what, numbers, ceiling)
    return CellTest(label, paired_t(x, y, "greater", margin), paired_t(x, y, "less", margin), what, numbers=numbers)


def equivalence_cell(label: str, x: Sequence[float], y: Sequence[float], margin: float, what: str = "mean d",
                     numbers: str = "", ceiling: float | None = None) -> CellTest:
    """Equivalence claim 'x equals y within ±margin', paired: agree test TOST, disagree test the one-sided test
    that puts the difference outside the margin (the smaller p of H1: mean d < −margin and H1: mean d > margin).
    Saturated (no test) when both means are ≥ `ceiling`: agreement there only shows that both saturate."""
    if len(x) < 2:
        return CellTest(label, what=what, why="one seed: no test over seeds", numbers=numbers)
    if at_ceiling(x, y, ceiling):
        return saturated_cell(label, what, numbers, ceiling)
    tost, _, _ = tost_paired(x, y, margin)
    below, above = paired_t(x, y, "less", -margin), paired_t(x, y, "greater", margin)
    return CellTest(label, tost, below if below.p <= above.p else above, what, numbers=numbers)


def decide(claim: str, cells: Sequence[CellTest], alpha: float = ALPHA, adjusted: float | None = None,
           family: int = 1) -> Verdict:
    """A claim over its cells, each side of it at α / 2 so that at most α of verdicts are wrong (at the margin
    both 'agrees' and 'disagrees' are false; each has at most α / 2). The claim's agree p is the largest of its
    cells' agree p (intersection–union: every cell must pass), its disagree p k × the smallest of its k cells'
    disagree p (Bonferroni), and its own p = 2 × the smaller of the two, capped at 1. It agrees when that p < α
    and points to agreement, disagrees when p < α and points to disagreement, else inconclusive. A cell not
    measured or with one seed keeps it from agreeing (inconclusive); a saturated cell too (verdict 'saturated, not
    testable' when nothing else stands in the way). `adjusted`: the claim's p after Holm over a family of
    `family` claims (decide_family), read in place of its own."""
    if not cells:
        raise ValueError(f"{claim}: no cells")
    k = len(cells)
    detail = "; ".join(c.text(alpha) for c in cells)
    untested = [c for c in cells if c.agree is None and not c.saturated]
    saturated = [c for c in cells if c.saturated]
    tested = [c for c in cells if c.agree is not None]
    dis = [c for c in cells if c.disagree is not None]
    best_dis = min(dis, key=lambda c: c.disagree.p) if dis else None
    worst = max(tested, key=lambda c: c.agree.p) if tested else None
    p_dis = min(1.0, k * best_dis.disagree.p) if best_dis else math.nan
    p_agr = worst.agree.p if worst and not untested and not saturated else math.nan
    sides = [p for p in (p_agr, p_dis) if not math.isnan(p)]
    p_claim = min(1.0, 2 * min(sides)) if sides else math.nan
    p_read = p_claim if adjusted is None else adjusted
    pc = None if math.isnan(p_claim) else p_claim
    ph = None if adjusted is None or math.isnan(adjusted) else adjusted
    leans_dis = not math.isnan(p_dis) and (math.isnan(p_agr) or p_dis < p_agr)

    def because(c: CellTest, t: TestResult, bonf: bool) -> str:
        how = f"claim p = 2 × {fmt_p(t.p if not bonf else p_dis)} = {fmt_p(p_claim)}"
        if adjusted is not None:
            how += f", Holm over {family} claims {fmt_p(p_read)}"
        times = f" (× {k} cells)" if bonf and k > 1 else ""
        return f"{c.label}: {t.text(c.what)}{times}; {how} {'<' if p_read < alpha else '≥'} {alpha:g}"

    if leans_dis and p_read < alpha:
        return Verdict(claim, DISAGREES, because(best_dis, best_dis.disagree, True), best_dis.disagree.statistic,
                       best_dis.disagree.p, detail, pc, ph)
    if untested:
        c = untested[0]
        return Verdict(claim, INCONCLUSIVE, f"{c.label}: {c.why or 'no test'}", None, None, detail, pc, ph)
    if saturated:
        names = ", ".join(c.label for c in saturated)
        if worst is None:
            return Verdict(claim, SATURATED, f"{names}: {saturated[0].why}", None, None, detail, pc, ph)
        # the claim is 'saturated' only when its other cells would let it agree (each at α / 2); else they decide
        others = (f"the weakest of the other {len(tested)} cell{'s' * (len(tested) != 1)}: {worst.label}: "
                  f"{worst.agree.text(worst.what)}")
        if worst.agree.p < alpha / 2:
            return Verdict(claim, SATURATED, f"{names}: {saturated[0].why}; {others} < {alpha / 2:g}", None, None,
                           detail, pc, ph)
        return Verdict(claim, INCONCLUSIVE, f"{others} ≥ {alpha / 2:g}; {names}: {saturated[0].why}",
                       worst.agree.statistic, worst.agree.p, detail, pc, ph)
    if leans_dis:
        return Verdict(claim, INCONCLUSIVE, because(best_dis, best_dis.disagree, True), best_dis.disagree.statistic,
                       best_dis.disagree.p, detail, pc, ph)
    verdict = AGREES if p_read < alpha else INCONCLUSIVE
    return Verdict(claim, verdict, because(worst, worst.agree, False), worst.agree.statistic, worst.agree.p, detail,
                   pc, ph)


def decide_family(claims: Sequence[tuple[str, Sequence[CellTest]]], alpha: float = ALPHA) -> list[Verdict]:
    """The claims of one study decided together: each claim's p (decide) Holm-adjusted over the claims that have
    one, and every verdict read from its adjusted p, so that the chance of any wrong verdict in the study stays
    at α."""
    alone = [decide(name, cells, alpha) for name, cells in claims]
    ps = [math.nan if v.p_claim is None else v.p_claim for v in alone]
    family = sum(not math.isnan(p) for p in ps)
    return [decide(name, cells, alpha, adjusted=p, family=family) if not math.isnan(p) else v
            for (name, cells), p, v in zip(claims, holm(ps), alone)]


# ---- group-sequential looks ---------------------------------------------------------------------------------

def pocock_alpha(looks: Sequence[int], alpha: float = ALPHA) -> float:
    """The nominal two-sided level of each look of a Pocock group-sequential design with looks after `looks`
    units (e.g. seeds 3, 4, 5): the constant c with P(|Z_k| > c for some k) = alpha when Z_k are the z statistics
    of the cumulative means (corr(Z_i, Z_j) = sqrt(n_i / n_j)), returned as 2·(1 − Φ(c)). Applied to each look's
    t-test p-value (the nominal-p form), so approximate for few seeds."""
    n = np.asarray(sorted(looks), dtype=np.float64)
    if n.size == 0 or n[0] <= 0:
        raise ValueError(f"pocock_alpha: looks must be positive, got {list(looks)}")
    if n.size == 1:
        return alpha
    corr = np.sqrt(np.minimum.outer(n, n) / np.maximum.outer(n, n))
    stats = _scipy("stats")
    mvn = stats.multivariate_normal(mean=np.zeros(n.size), cov=corr, seed=0, maxpts=200_000, abseps=1e-7,
                                    releps=1e-7)  # a seeded integration: the same level on every run

    def excess(c: float) -> float:
        inside = mvn.cdf(np.full(n.size, c), lower_limit=np.full(n.size, -c))
        return (1 - inside) - alpha

    from scipy import optimize

    c = optimize.brentq(excess, float(_scipy("special").ndtri(1 - alpha / 2)), 6.0, xtol=1e-6)
    return float(2 * stats.norm.sf(c))
