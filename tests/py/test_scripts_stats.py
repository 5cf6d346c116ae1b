"""Summary statistics of the reproduction report (scripts/drope_scripts/stats.py) against closed forms and tables."""
import math

import pytest

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
