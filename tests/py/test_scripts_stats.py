"""The statistics module (scripts/drope_scripts/stats.py, docs/design.md#statistics-protocol): summaries against
closed forms and tables; Wilson, the paired t test, TOST, Fisher's exact test and the tests from summaries against
scipy to 1e-12; the bootstrap; the verdict rules."""
import math

import numpy as np
import pytest
from scipy import stats as sps

from drope_scripts import stats


def test_t_quantiles_match_closed_forms_and_the_table():
    p = 0.975
    assert stats.t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), abs=1e-9)  # Cauchy
    a = 2 * p - 1
    assert stats.t_quantile(p, 2) == pytest.approx(a * math.sqrt(2 / (1 - a * a)), abs=1e-9)
    # Student t, 97.5 % (printed tables, 3 decimals)
    for dof, t in {3: 3.182, 4: 2.776, 5: 2.571, 9: 2.262, 30: 2.042, 120: 1.980}.items():
        assert stats.t_quantile(p, dof) == pytest.approx(t, abs=5e-4)


def test_interval_of_a_known_sample():
    s = stats.summarize([1.0, 2.0, 3.0, 4.0, 5.0])
    sd = math.sqrt(2.5)  # sum of squares 10, n - 1 = 4
    half = 2.7764451051977987 * sd / math.sqrt(5)  # t(0.975, 4)
    assert (s.n, s.mean, s.min, s.max) == (5, 3.0, 1.0, 5.0)
    assert s.std == pytest.approx(sd, abs=1e-12)
    assert s.ci_low == pytest.approx(3.0 - half, abs=1e-6) and s.ci_high == pytest.approx(3.0 + half, abs=1e-6)
    assert s.ci_high - s.ci_low == pytest.approx(3.926486, abs=1e-6)


def test_two_values_and_other_confidence():
    s = stats.summarize([20.0, 22.0], confidence=0.9)
    half = math.tan(math.pi * 0.45) * math.sqrt(2.0) / math.sqrt(2)  # t(0.95, 1) = tan(0.45 π)
    assert s.std == pytest.approx(math.sqrt(2.0))
    assert (s.ci_low, s.ci_high) == pytest.approx((21.0 - half, 21.0 + half), abs=1e-9)


def test_one_value_has_no_interval_and_none_is_an_error():
    s = stats.summarize([7.5])
    assert (s.n, s.mean, s.std, s.min, s.max) == (1, 7.5, 0.0, 7.5, 7.5)
    assert math.isnan(s.ci_low) and math.isnan(s.ci_high)
    with pytest.raises(ValueError):
        stats.summarize([])


# ---- the statistics protocol (docs/design.md#statistics-protocol) against scipy --------------------------------

EXACT = 1e-12


@pytest.mark.parametrize("k, n", [(0, 10), (1, 10), (5, 10), (9, 10), (10, 10), (0, 1), (1, 1), (997, 1000),
                                  (1000, 1000), (3, 7), (9996, 10000), (250, 4000)])
@pytest.mark.parametrize("conf", [0.95, 0.9, 0.99])
def test_wilson_equals_scipy(k, n, conf):
    ci = sps.binomtest(k, n).proportion_ci(confidence_level=conf, method="wilson")
    lo, hi = stats.wilson(k, n, conf)
    assert lo == pytest.approx(ci.low, abs=EXACT) and hi == pytest.approx(ci.high, abs=EXACT)
    assert 0.0 <= lo <= k / n <= hi <= 1.0
    plo, phi = stats.wilson_percent(k, n, conf)
    assert 0.0 <= plo <= phi <= 100.0 and plo == pytest.approx(100 * ci.low, abs=1e-10)


def test_wilson_known_values_and_refusals():
    # 10/10 seeds: the recovery study's [72, 100]; 0/10: [0, 28]
    assert [round(100 * v) for v in stats.wilson(10, 10)] == [72, 100]
    assert [round(100 * v) for v in stats.wilson(0, 10)] == [0, 28]
    assert [round(100 * v) for v in stats.wilson(5, 10)] == [24, 76]
    # 10 seeds × 1,000 queries, all right: [99.96, 100], not "± 0.0"
    assert stats.wilson_percent(10000, 10000)[0] == pytest.approx(99.9616, abs=1e-4)
    for bad in ((11, 10), (-1, 10), (0, 0)):
        with pytest.raises(ValueError, match="wilson"):
            stats.wilson(*bad)


def test_clip_keeps_intervals_in_0_100():
    assert stats.clip(46.6 - 48.9, 46.6 + 48.9) == (0.0, 95.5)
    assert stats.clip(83.8 - 68.1, 83.8 + 68.1) == (pytest.approx(15.7), 100.0)
    assert stats.clip(-5.0, -1.0) == (0.0, 0.0) and stats.clip(101.0, 120.0) == (100.0, 100.0)
    assert stats.clip(-1.0, 2.0, 0.0, 1.0) == (0.0, 1.0)


def test_bootstrap_interval_is_reproducible_and_inside_the_range():
    values = [100.0, 10.0, 30.0, 90.0, 3.0]
    lo, hi = stats.bootstrap_mean(values)
    assert (lo, hi) == stats.bootstrap_mean(values)  # a fixed generator
    assert min(values) <= lo < np.mean(values) < hi <= max(values)
    # the same percentile bootstrap written out
    x = np.asarray(values)
    means = x[np.random.default_rng(0).integers(0, 5, size=(10000, 5))].mean(axis=1)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(means, [0.025, 0.975])), abs=EXACT)
    # and scipy's percentile bootstrap agrees within its Monte-Carlo error
    ref = sps.bootstrap((x,), np.mean, confidence_level=0.95, n_resamples=10000, method="percentile",
                        rng=np.random.default_rng(1)).confidence_interval
    assert lo == pytest.approx(ref.low, abs=4.0) and hi == pytest.approx(ref.high, abs=4.0)
    assert stats.bootstrap_mean([100.0] * 5) == (100.0, 100.0) and stats.bootstrap_mean([42.0]) == (42.0, 42.0)


def test_accuracy_interval_shows_query_noise_at_the_ceiling_and_stays_in_0_100():
    lo, hi = stats.accuracy_interval([100.0] * 10, (10000, 10000))
    assert hi == 100.0 and lo == pytest.approx(99.9616, abs=1e-4)
    # one seed: the Wilson interval of its queries
    assert stats.accuracy_interval([99.7], (997, 1000)) == pytest.approx(stats.wilson_percent(997, 1000))
    # a bimodal cell: never below 0 or above 100, contains the bootstrap interval and the pooled Wilson interval
    values = [100.0, 0.5, 99.0, 1.0, 100.0]
    counts = (round(sum(values) * 10), 5000)
    lo, hi = stats.accuracy_interval(values, counts)
    blo, bhi = stats.bootstrap_mean(values)
    wlo, whi = stats.wilson_percent(*counts)
    assert 0.0 <= lo <= min(blo, wlo) and max(bhi, whi) <= hi <= 100.0


SAMPLES = [
    ([99.9, 100.0, 100.0, 99.8, 100.0], [100.0, 99.7, 100.0, 100.0, 99.9]),
    ([23.3, 3.4, 46.4, 8.8, 55.0], [95.1, 100.0, 90.0, 97.5, 93.0]),
    ([1.0, 2.0, 4.0], [0.5, 2.5, 1.0]),
    ([82.9, 48.0, 51.0, 100.0, 99.0, 91.0, 90.0, 99.0, 100.0, 53.0],
     [73.1, 40.0, 62.0, 88.0, 74.0, 50.0, 70.0, 96.0, 100.0, 99.0]),
]


@pytest.mark.parametrize("x, y", SAMPLES)
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_paired_t_equals_scipy(x, y, alternative):
    ref = sps.ttest_rel(x, y, alternative=alternative)
    got = stats.paired_t(x, y, alternative)
    assert got.statistic == pytest.approx(float(ref.statistic), abs=EXACT, rel=EXACT)
    assert got.p == pytest.approx(float(ref.pvalue), abs=EXACT)
    assert got.df == len(x) - 1 and got.n == len(x) and got.estimate == pytest.approx(np.mean(np.subtract(x, y)))
    # with a margin: the one-sample test of the differences against it
    d = np.subtract(x, y)
    ref = sps.ttest_1samp(d, 2.0, alternative=alternative)
    got = stats.paired_t(x, y, alternative, margin=2.0)
    assert got.statistic == pytest.approx(float(ref.statistic), abs=EXACT, rel=EXACT)
    assert got.p == pytest.approx(float(ref.pvalue), abs=EXACT)
    one = stats.one_sample_t(x, 50.0, alternative)
    ref = sps.ttest_1samp(x, 50.0, alternative=alternative)
    assert one.p == pytest.approx(float(ref.pvalue), abs=EXACT)


@pytest.mark.parametrize("x, y", SAMPLES)
@pytest.mark.parametrize("margin", [0.5, 2.0, 10.0])
def test_tost_is_two_one_sided_scipy_tests(x, y, margin):
    lower = sps.ttest_rel(np.asarray(x) + margin, y, alternative="greater")  # H1: mean d > −margin
    upper = sps.ttest_rel(np.asarray(x) - margin, y, alternative="less")  # H1: mean d < margin
    d = np.subtract(x, y)
    assert lower.pvalue == pytest.approx(sps.ttest_1samp(d, -margin, alternative="greater").pvalue, abs=1e-12)
    tost, lo, up = stats.tost_paired(x, y, margin)
    assert lo.p == pytest.approx(float(lower.pvalue), abs=EXACT) and up.p == pytest.approx(float(upper.pvalue),
                                                                                          abs=EXACT)
    assert tost.p == pytest.approx(max(float(lower.pvalue), float(upper.pvalue)), abs=EXACT)
    assert tost.alternative == "equivalence" and tost.null == margin


def test_tost_passes_at_the_ceiling_and_fails_below_it():
    rope = [100.0] * 5
    tost, _, _ = stats.tost_paired([100.0, 99.7, 100.0, 100.0, 99.9], rope, 2.0)
    assert tost.p < 1e-4
    tost, _, _ = stats.tost_paired([97.0, 96.8, 97.1, 97.0, 96.9], rope, 2.0)
    assert tost.p > 0.5
    assert stats.paired_t([97.0, 96.8, 97.1, 97.0, 96.9], rope, "less", -2.0).p < 1e-4


def test_no_spread_is_decided_by_the_sign_and_at_the_margin_by_nothing():
    same = [100.0] * 5
    t = stats.paired_t(same, same, "greater", -2.0)
    ref = sps.ttest_1samp([0.0] * 5, -2.0, alternative="greater")
    assert (t.statistic, t.p) == (math.inf, 0.0) == (float(ref.statistic), float(ref.pvalue))
    assert stats.paired_t(same, same, "less", -2.0).p == 1.0
    at = stats.paired_t(same, same, "greater")
    assert (at.statistic, at.p) == (0.0, 1.0)  # scipy: nan
    assert stats.tost_paired(same, same, 2.0)[0].p == 0.0


def test_t_tests_refuse_too_few_or_unpaired_values():
    with pytest.raises(ValueError, match="at least 2"):
        stats.paired_t([1.0], [2.0])
    with pytest.raises(ValueError, match="paired"):
        stats.paired_t([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="alternative"):
        stats.paired_t([1.0, 2.0], [1.0, 3.0], "bigger")
    with pytest.raises(ValueError, match="margin"):
        stats.tost_paired([1.0, 2.0], [1.0, 3.0], 0.0)


@pytest.mark.parametrize("x, y", SAMPLES)
def test_tests_from_summaries_equal_the_tests_on_values(x, y):
    n = len(x)
    s = stats.summarize(x)
    half = (s.ci_high - s.ci_low) / 2
    assert stats.sd_from_half_width(half, n) == pytest.approx(s.std, abs=1e-12)
    for alt in ("two-sided", "greater", "less"):
        got = stats.one_sample_t_from_summary(s.mean, s.std, n, 50.0, alt)
        assert got.p == pytest.approx(float(sps.ttest_1samp(x, 50.0, alternative=alt).pvalue), abs=EXACT)
        ref = sps.ttest_ind_from_stats(np.mean(x), np.std(x, ddof=1), n, np.mean(y), np.std(y, ddof=1), len(y),
                                       equal_var=False, alternative=alt)
        got = stats.welch_t_from_summary(np.mean(x), np.std(x, ddof=1), n, np.mean(y), np.std(y, ddof=1), len(y), alt)
        assert got.statistic == pytest.approx(float(ref.statistic), abs=EXACT, rel=EXACT)
        assert got.p == pytest.approx(float(ref.pvalue), abs=EXACT)
        ref = sps.ttest_ind(x, y, equal_var=False, alternative=alt)
        assert got.p == pytest.approx(float(ref.pvalue), abs=EXACT)


@pytest.mark.parametrize("x, y", SAMPLES)
def test_welch_tost_from_summaries_is_two_one_sided_scipy_tests(x, y):
    margin = 5.0
    m1, s1, m2, s2 = np.mean(x), np.std(x, ddof=1), np.mean(y), np.std(y, ddof=1)
    lower = sps.ttest_ind_from_stats(m1 + margin, s1, len(x), m2, s2, len(y), equal_var=False, alternative="greater")
    upper = sps.ttest_ind_from_stats(m1 - margin, s1, len(x), m2, s2, len(y), equal_var=False, alternative="less")
    tost, lo, up = stats.tost_welch_from_summary(m1, s1, len(x), m2, s2, len(y), margin)
    assert lo.p == pytest.approx(float(lower.pvalue), abs=EXACT) and up.p == pytest.approx(float(upper.pvalue),
                                                                                          abs=EXACT)
    assert tost.p == pytest.approx(max(float(lower.pvalue), float(upper.pvalue)), abs=EXACT)
    assert tost.alternative == "equivalence" and tost.null == margin
    with pytest.raises(ValueError, match="margin must be > 0"):
        stats.tost_welch_from_summary(m1, s1, len(x), m2, s2, len(y), 0.0)


TABLES = [(5, 10, 2, 10), (1, 10, 5, 10), (10, 10, 6, 10), (6, 10, 10, 10), (0, 10, 10, 10), (10, 10, 9, 10),
          (3, 7, 4, 9), (0, 5, 0, 5), (10, 10, 10, 10), (12, 40, 30, 41), (1, 1, 0, 1)]


@pytest.mark.parametrize("k1, n1, k2, n2", TABLES)
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_fisher_exact_equals_scipy(k1, n1, k2, n2, alternative):
    ref = sps.fisher_exact([[k1, n1 - k1], [k2, n2 - k2]], alternative=alternative)
    got = stats.fisher_exact(k1, n1, k2, n2, alternative)
    assert got.p == pytest.approx(float(ref.pvalue), abs=EXACT)
    if math.isnan(ref.statistic):
        assert math.isnan(got.statistic)
    else:
        assert got.statistic == ref.statistic


def test_fisher_values_the_study_quotes():
    assert stats.fisher_exact(5, 10, 2, 10).p == pytest.approx(0.3498452, abs=1e-7)  # "higher lr helps at 200"
    assert stats.fisher_exact(5, 10, 2, 10, "greater").p == pytest.approx(0.1749226, abs=1e-7)
    assert stats.fisher_exact(5, 10, 1, 10).p == pytest.approx(0.1409, abs=1e-4)  # "short warm-up hurts"
    assert stats.fisher_exact(10, 10, 6, 10).p == pytest.approx(0.0867, abs=1e-4)  # "QK-norm matters at 1e-3"


def test_directional_and_equivalence_verdicts():
    rope = [100.0] * 5
    ceiling = [100.0, 99.7, 100.0, 100.0, 99.9]
    v = stats.decide("(e)", [stats.equivalence_cell("C", ceiling, rope, 2.0)])
    assert v.verdict == "agrees" and v.p < 1e-4 and "TOST (paired t), H1: |mean d| < 2" in v.test
    below = [97.0, 96.8, 97.1, 97.0, 96.9]
    v = stats.decide("(e)", [stats.equivalence_cell("C", below, rope, 2.0)])
    assert v.verdict == "disagrees" and "H1: mean d < -2" in v.test and v.p < 1e-4
    noisy = [100.0, 95.0, 100.0, 99.0, 97.0]
    assert stats.decide("(e)", [stats.equivalence_cell("C", noisy, rope, 2.0)]).verdict == "inconclusive"
    # directional: agrees / disagrees by the opposite one-sided test / inconclusive
    up = stats.directional_cell("4C", [99.0, 98.0, 99.5, 97.0, 99.0], [60.0, 70.0, 50.0, 80.0, 65.0])
    assert stats.decide("(f)", [up]).verdict == "agrees"
    down = stats.directional_cell("4C", [60.0, 70.0, 50.0, 80.0, 65.0], [99.0, 98.0, 99.5, 97.0, 99.0])
    assert stats.decide("(f)", [down]).verdict == "disagrees"
    tie = stats.directional_cell("2C", [97.0, 90.0, 99.0, 100.0, 100.0], [95.0, 96.0, 92.0, 99.0, 93.0])
    v = stats.decide("(b)", [tie])
    assert v.verdict == "inconclusive" and "≥ 0.05" in v.test
    # a claim over cells: one inconclusive cell keeps it from agreeing; one disagreeing cell (at α/k) decides
    assert stats.decide("(d)", [up, tie]).verdict == "inconclusive"
    assert stats.decide("(d)", [up, down]).verdict == "disagrees"
    one = stats.directional_cell("8C", [99.0], [50.0])
    v = stats.decide("(f)", [up, one])
    assert v.verdict == "inconclusive" and "one seed" in v.test and v.p is None
    missing = stats.CellTest("crop", why="RoPE crop was not measured")
    assert stats.decide("(c)", [missing]).verdict == "inconclusive"
    assert "RoPE crop was not measured" in stats.decide("(c)", [up, missing]).detail


def test_bonferroni_over_cells_for_disagreement():
    # each side is tested at α / 2: a one-sided p just under 0.025 disagrees alone, not as one of two cells, and a
    # p between 0.025 and 0.05 decides nothing (the rule before, at α per side, had it disagree)
    x = [1.0, 2.0, 0.0, 0.5, 1.0]
    y = [2.0] * 5
    p = stats.paired_t(x, y, "less").p
    assert 0.0125 < p < 0.025
    cell = stats.directional_cell("L", x, y)
    v = stats.decide("one", [cell])
    assert v.verdict == "disagrees" and v.p_claim == pytest.approx(2 * p)
    assert stats.decide("two", [cell, stats.directional_cell("M", x, x)]).verdict == "inconclusive"
    x = [1.0, 2.3, 0.0, 0.5, 1.5]
    assert 0.025 < stats.paired_t(x, y, "less").p < 0.05
    assert stats.decide("one", [stats.directional_cell("L", x, y)]).verdict == "inconclusive"


def test_verdict_and_test_text():
    t = stats.paired_t([3.0, 4.0, 5.0], [1.0, 1.0, 1.0], "greater")
    assert t.text() == f"paired t, H1: mean d > 0, t(2) = {t.statistic:.3g}, p = {stats.fmt_p(t.p)}"
    f = stats.fisher_exact(5, 10, 2, 10, "greater")
    assert f.text("odds ratio") == "Fisher exact, H1: odds ratio > 1, odds ratio 4, p = 0.175"
    assert stats.p_text(0.0) == "p < 1e-300" and stats.p_text(0.5) == "p = 0.5"
    assert stats.fmt_p(0.0) == "< 1e-300" and stats.fmt_p(1.23e-5) == "1.23e-05" and stats.fmt_p(0.0499) == "0.0499"
    v = stats.Verdict("(e) x", "agrees", "C: TOST", 5.0, 0.001, "")
    assert v.line() == "(e) x: agrees (C: TOST)"


# ---- error rates the verdict rules promise (simulations) ----------------------------------------------------

def _verdict_rates(make, sims: int, rng) -> dict[str, float]:
    out = {"agrees": 0, "disagrees": 0, "inconclusive": 0}
    for _ in range(sims):
        out[stats.decide("x", [make(rng)]).verdict] += 1
    return {k: v / sims for k, v in out.items()}


def test_a_directional_claim_at_its_margin_is_wrong_at_most_alpha_of_the_time():
    """True difference exactly at the margin: 'exceeds by more than δ' and 'falls short of δ' are both false. Each
    side at α / 2: about α / 2 each, α together (the rule with α per side gave 2α)."""
    rng = np.random.default_rng(1)
    sims = 4000
    rates = _verdict_rates(lambda r: stats.directional_cell("L", 2.0 + r.normal(0, 3, 10), np.zeros(10), 2.0), sims,
                           rng)
    se = math.sqrt(0.05 * 0.95 / sims)
    assert abs(rates["agrees"] + rates["disagrees"] - 0.05) < 4 * se, rates
    assert abs(rates["agrees"] - 0.025) < 4 * math.sqrt(0.025 / sims) and abs(rates["disagrees"] - 0.025) < 0.01
    # the old rule, each one-sided test at α, on the same kind of data: twice the wrong verdicts
    old = 0
    for _ in range(sims):
        x = 2.0 + rng.normal(0, 3, 10)
        old += sps.ttest_1samp(x, 2.0, alternative="greater").pvalue < 0.05 or \
            sps.ttest_1samp(x, 2.0, alternative="less").pvalue < 0.05
    assert abs(old / sims - 0.10) < 4 * math.sqrt(0.1 * 0.9 / sims)


def test_an_equivalence_claim_at_its_margin_is_wrong_at_most_alpha_of_the_time():
    rng = np.random.default_rng(2)
    sims = 4000
    rates = _verdict_rates(lambda r: stats.equivalence_cell("C", 2.0 + r.normal(0, 1, 10), np.zeros(10), 2.0), sims,
                           rng)
    assert rates["agrees"] + rates["disagrees"] < 0.05 + 4 * math.sqrt(0.05 * 0.95 / sims), rates
    assert rates["agrees"] < 0.025 + 4 * math.sqrt(0.025 / sims)


def test_holm_over_a_studys_claims_keeps_any_wrong_verdict_at_alpha():
    """Six independent claims, every one at its margin: without the family correction about 1 − 0.95^6 = 26 % of
    studies have a wrong verdict; with Holm over the claims at most α."""
    rng = np.random.default_rng(3)
    sims = 1500
    wrong = alone = 0
    for _ in range(sims):
        claims = [(f"({k})", [stats.directional_cell("L", 2.0 + rng.normal(0, 3, 10), np.zeros(10), 2.0)])
                  for k in "abcdef"]
        wrong += any(v.verdict != "inconclusive" for v in stats.decide_family(claims))
        alone += any(stats.decide(n, c).verdict != "inconclusive" for n, c in claims)
    assert wrong / sims < 0.05 + 4 * math.sqrt(0.05 * 0.95 / sims)
    assert abs(alone / sims - (1 - 0.95 ** 6)) < 4 * math.sqrt(0.26 * 0.74 / sims)


def test_holm_equals_the_step_down_by_hand_and_decide_family_reads_it():
    assert stats.holm([0.01, 0.04, 0.03, math.nan]) == pytest.approx([0.03, 0.06, 0.06, math.nan], nan_ok=True)
    strong = stats.directional_cell("L", [5.0, 6.0, 7.0, 5.5, 6.5], [0.0] * 5)
    weak = stats.directional_cell("L", [1.0, 2.3, 0.8, 0.5, 1.5], [0.0] * 5)
    p_weak = stats.paired_t([1.0, 2.3, 0.8, 0.5, 1.5], [0.0] * 5, "greater").p
    v = stats.decide_family([("s", [strong]), ("w", [weak])])
    assert v[1].p_claim == pytest.approx(2 * p_weak) and v[1].p_holm == pytest.approx(max(2 * p_weak,
                                                                                           v[0].p_holm))
    assert "Holm over 2 claims" in v[1].test


def test_saturated_cells_are_not_tested_either_way():
    top, yarn = [100.0] * 10, [99.5, 99.6, 99.4, 99.7, 99.5, 99.6, 99.5, 99.6, 99.4, 99.6]
    c = stats.directional_cell("4C", top, yarn, 2.0, ceiling=stats.CEILING)
    assert c.saturated and c.agree is None and c.disagree is None and "saturated, not testable" in c.why
    assert stats.decide("(d)", [c]).verdict == "saturated, not testable"
    assert stats.equivalence_cell("C", top, yarn, 2.0, ceiling=stats.CEILING).saturated
    # one side below the ceiling: tested (and here DroPE does not beat it by 2 points)
    low = [y - 1.0 for y in yarn]
    assert stats.decide("(d)", [stats.directional_cell("4C", top, low, 2.0, ceiling=stats.CEILING)]).verdict == \
        "disagrees"
    # a saturated cell beside a failing one: the failing one decides (inconclusive), not the ceiling
    noisy = stats.directional_cell("8C", [100.0, 90.0, 70.0, 100.0, 95.0], [80.0, 95.0, 85.0, 90.0, 99.0], 2.0)
    assert stats.decide("(d)", [c, noisy]).verdict == "inconclusive"


def test_pocock_nominal_level_matches_its_published_value_and_controls_repeated_looks():
    """Pocock's per-look level for 3 equally spaced looks at two-sided 0.05 is 0.0221 (Pocock 1977, Table 1); at
    looks after 3, 4, 5 seeds the level is computed for that spacing. A simulation of paired t tests of no
    difference, looked at after 3, 4 and 5 seeds: uncorrected (each look at 0.05) about twice α, at the Pocock
    level about α."""
    assert stats.pocock_alpha([1, 2, 3]) == pytest.approx(0.0221, abs=2e-4)
    level = stats.pocock_alpha([3, 4, 5])
    assert 0.0221 < level < 0.05 and stats.pocock_alpha([5]) == 0.05
    rng = np.random.default_rng(4)
    sims = 20000
    x = rng.normal(0, 1, (sims, 5))
    p = np.stack([sps.ttest_1samp(x[:, :n], 0.0, axis=1).pvalue for n in (3, 4, 5)], axis=1)
    uncorrected, corrected = (p < 0.05).any(axis=1).mean(), (p < level).any(axis=1).mean()
    se = math.sqrt(0.05 * 0.95 / sims)
    assert uncorrected > 0.085 and abs(corrected - 0.05) < 5 * se, (uncorrected, corrected)
