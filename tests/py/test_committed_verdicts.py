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
    # RoPE and DroPE both average >= 99.5 % at C: the equivalence there only shows that both saturate
    assert "**saturated, not testable** (DroPE − RoPE at C: saturated, not testable: both sides ≥ 99.5 %)" in line
    assert "10/10, Wilson 95 % [72, 100]" in text


def test_reproduction_claims_from_the_committed_summaries(text):
    rows = {l.split(" | ")[0][2:]: l for l in text.splitlines() if l.startswith("| (")}
    assert "**agrees**" in rows["(a) RoPE collapses beyond C (falls by more than 10 points)"]
    assert "**inconclusive**" in rows["(b) PI hurts at 2C (by more than 2 points)"]
    assert "**disagrees**" in rows["(c) NTK and YaRN behave like cropping the context to C"]
    assert "**inconclusive** | DroPE − PI+temp at 4C: RoPE+PI+temp was not measured" in rows[
        "(d) DroPE beats every RoPE-scaling method by more than 2 points, with and without a fitted temperature, at "
        "4C and 8C"]
    assert "**saturated, not testable**" in rows["(e) DroPE recovers RoPE's accuracy at C (within 2 points)"]
    # 4C: one-sided p = 0.039 against the 2-point margin, at α / 2 and Holm over the claims: not decided
    f = rows["(f) the temperature matters at 4C and 8C (by more than 2 points)"]
    assert "**inconclusive**" in f and "Holm over 5 claims" in f


def synthetic_report(far: dict[str, tuple[str, str, str]]) -> str:
    """A reproduction table (mean ± half-width over 5 seeds) with the given far cells at 2C, 4C, 8C."""
    rows = {"RoPE": ("100.0 ± 0.0", "95.1 ± 5.8", "23.3 ± 22.2", "2.3 ± 1.4"),
            "RoPE+PI": ("–", "97.2 ± 7.5", "78.2 ± 21.3", "49.2 ± 22.5"),
            "DroPE+temp": ("99.9 ± 0.2", "99.0 ± 1.0", "98.0 ± 1.0", "97.0 ± 1.0"),
            "DroPE c=0": ("99.9 ± 0.2", "90.0 ± 2.0", "60.0 ± 5.0", "40.0 ± 5.0")}
    rows.update({label: ("–", *cells) for label, cells in far.items()})
    return "\n".join(["| method | C | 2C | 4C | 8C |", "|---|---:|---:|---:|---:|"] +
                     [f"| {label} | {' | '.join(cells)} |" for label, cells in rows.items()]) + "\n"


def claim_c(report: str) -> str:
    return next(line for line in cv.reproduction(report) if line.startswith("| (c) "))


CROP_LIKE = ("6.4 ± 1.2", "6.0 ± 1.0", "6.2 ± 1.1")


def test_c_reads_a_measured_crop_by_welch_tost():
    crop = {"RoPE crop": ("6.1 ± 1.0", "6.3 ± 1.3", "5.9 ± 0.9")}
    line = claim_c(synthetic_report({"RoPE+NTK": CROP_LIKE, "RoPE+YaRN": CROP_LIKE, **crop}))
    assert "**agrees**" in line and "not measured" not in line
    assert "RoPE+NTK − crop at 4C: TOST (Welch t, from summaries), H1: |far(RoPE+NTK) − far(crop)| < 5" in line
    # YaRN retrieves far needles at 2C: 84 points above the crop, outside the margin
    far_yarn = ("90.0 ± 3.0", *CROP_LIKE[1:])
    line = claim_c(synthetic_report({"RoPE+NTK": CROP_LIKE, "RoPE+YaRN": far_yarn, **crop}))
    assert "**disagrees**" in line and "RoPE+YaRN − crop at 2C" in line and "H1: far(RoPE+YaRN) − far(crop) > 5" in line
    # noisy cells 5 points above the crop: neither within nor outside the margin
    noisy = ("11.0 ± 8.0", *CROP_LIKE[1:])
    assert "**inconclusive**" in claim_c(synthetic_report({"RoPE+NTK": noisy, "RoPE+YaRN": CROP_LIKE, **crop}))


def test_c_without_the_crop_keeps_the_bound():
    line = claim_c(synthetic_report({"RoPE+NTK": CROP_LIKE, "RoPE+YaRN": CROP_LIKE}))
    assert "**inconclusive**" in line and "crop not measured: can disagree, not agree" in line
    line = claim_c(synthetic_report({"RoPE+NTK": CROP_LIKE, "RoPE+YaRN": ("90.0 ± 3.0", *CROP_LIKE[1:])}))
    assert "**disagrees**" in line and "one-sample t (from summary), H1: mean far(RoPE+YaRN) > 11.2" in line


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


def test_claims_study_redone_from_its_csv_match_its_committed_report(text):
    """The claims study's six verdicts, redone from the per-seed CSV alone, are the lines of its committed report
    (same test, statistic and p-value), and (c) reads the measured crop."""
    report = (cv.RESULTS / "offset-key-claims.md").read_text(encoding="utf-8")
    committed = [l for l in report.splitlines() if l.startswith("claim (")]
    redone = [l[2:] for l in text.splitlines() if l.startswith("- claim (")][:6]
    assert len(committed) == 6 and redone == committed
    assert "| RoPE crop |" in report and "crop not measured" not in report
