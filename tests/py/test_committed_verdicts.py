"""The verdicts re-derived from the committed data (studies/committed_verdicts.py): the numbers docs/results.md and
docs/recovery-study.md quote, read back from docs/results/ under the statistics protocol."""
import pytest

from drope_scripts import stats
from studies import committed_verdicts as cv


@pytest.fixture(scope="module")
def text():
    return cv.build()


def test_far_fraction_matches_the_generator_geometry():
    # L = 2C: body 243 positions, far when the needle is before SEP − C: (243 + 1 + 3k − 128) / 243 averaged over k
    assert cv.far_fraction(2) == pytest.approx((116 + 119 + 122 + 125) / (4 * 243))
    assert 0.49 < cv.far_fraction(2) < cv.far_fraction(4) < cv.far_fraction(8) < 0.88
    assert cv.far_fraction(1) == 0.0  # at C nothing is farther than C


def test_headline_from_the_confirmation_seeds(text):
    assert "Confirmation seeds 1000–1009 (test split" in text
    assert "| DroPE (fitted temperature) | 99.9 [99.8, 100.0] |" in text
    line = next(l for l in text.splitlines() if l.startswith("- (e)"))
    assert "**agrees** (DroPE − RoPE at C: TOST (paired t), H1: |mean d| < 2, t(9) = " in line
    assert "10/10, Wilson 95 % [72, 100]" in text


def test_reproduction_claims_from_the_committed_summaries(text):
    rows = {l.split(" | ")[0][2:]: l for l in text.splitlines() if l.startswith("| (")}
    assert "**agrees**" in rows["(a) RoPE collapses beyond C (falls by more than 10 points)"]
    assert "**inconclusive**" in rows["(b) PI hurts at 2C"]
    assert "**disagrees**" in rows["(c) NTK and YaRN behave like cropping the context to C"]
    assert "**inconclusive** | DroPE − PI+temp at 4C: RoPE+PI+temp was not measured" in rows[
        "(d) DroPE beats every RoPE-scaling method, with and without a fitted temperature, at 4C and 8C"]
    assert "**agrees**" in rows["(e) DroPE recovers RoPE's accuracy at C (within 2 points)"]
    assert "**agrees**" in rows["(f) the temperature matters at 4C and 8C"]


@pytest.mark.parametrize("statement, verdict, p", [
    ("higher lr helps at 200 steps (drop at 600)", "inconclusive", "p = 0.35"),
    ("a short warm-up hurts QK-norm at 200 steps (lr 3e-3)", "inconclusive", "p = 0.141"),
    ("QK-norm helps at 400 steps, lr 1e-3, warm-up 10 %", "inconclusive", "p = 0.0867"),
    ("drop at 400 / 400 steps recovers more than drop at 600 / 200 (lr 3e-3)", "agrees", "p = 0.0325"),
])
def test_secondary_claims(text, statement, verdict, p):
    line = next(l for l in text.splitlines() if l.startswith(f"| {statement} |"))
    assert f"**{verdict}**" in line and f"two-sided {p}" in line


def test_prose_gap_disagrees_with_matching_rope(text):
    rows = [l for l in text.splitlines() if l.startswith(("| 12.5 %", "| 25 %", "| 50 %"))]
    assert len(rows) == 3 and all("**disagrees**" in r for r in rows)
    assert "| 25 % | +18.4 % [16.3, 20.5] |" in text


def test_posthoc_verdicts_read_the_two_sided_p():
    t = stats.fisher_exact(10, 10, 6, 10)
    assert t.p == pytest.approx(0.0867, abs=1e-4) and cv.posthoc(t, +1) == "inconclusive"
    t = stats.fisher_exact(10, 10, 2, 10)
    assert cv.posthoc(t, +1) == "agrees" and cv.posthoc(t, -1) == "disagrees"
