"""studies/recovery_study.py without training: the Wilson interval, the recovery decision, the recipe
grid, selection from held-out numbers only, fresh confirmation seeds, options. The tiny study end to end:
test_recovery_study_e2e.py; its task runner (claims, dependencies, workers): test_driver_parallel.py."""
import pytest

from conftest import BIN, ROOT
from drope_scripts import recovery, stats
from studies import recovery_study as rs
from studies.recovery_study import HELDOUT, TEST, Recipe, SeedResult


def test_wilson_against_hand_computed_values():
    # (k, n) → the interval from the roots of (n + z²)p² − (2k + z²)p + k²/n = 0, z = 1.95996 (worked by hand:
    # 8/10 is the textbook example, 0.490–0.943).
    cases = {(8, 10): (0.4901625, 0.9433178), (0, 10): (0.0, 0.2775328), (10, 10): (0.7224672, 1.0),
             (1, 3): (0.0614919, 0.7923404)}
    for (k, n), (lo, hi) in cases.items():
        got = stats.wilson(k, n)
        assert got == pytest.approx((lo, hi), abs=1e-6), (k, n)
    lo, hi = stats.wilson(2, 10)  # symmetric: 2/10 mirrors 8/10
    assert (lo, hi) == pytest.approx((1 - 0.9433178, 1 - 0.4901625), abs=1e-6)
    for k, n in ((1, 0), (-1, 5), (6, 5)):
        with pytest.raises(ValueError):
            stats.wilson(k, n)


def test_recovery_decision():
    assert recovery.recovered(98.0, 100.0)  # exactly 2 points below
    assert not recovery.recovered(97.9, 100.0)
    assert recovery.recovered(100.0, 99.0)  # above RoPE
    assert recovery.recovered(95.0, 100.0, tolerance=5.0) and not recovery.recovered(95.0, 100.0, tolerance=4.9)
    assert SeedResult("a", 0, HELDOUT, 99.9, 98.0, {}).recovered()
    assert not SeedResult("a", 0, HELDOUT, 99.9, 52.0, {}).recovered()


def test_recipes_and_the_equal_budget():
    rec = rs.grid((1e-3, 3e-3), (0.1, 0.04), ("qk", "none"), (12.5, 25.0, 50.0))
    assert len(rec) == 24 and len({r.slug for r in rec}) == 24
    assert all("." not in r.slug for r in rec)
    assert rec[0] == Recipe(1e-3, 0.1, "qk", 12.5)  # the grid's order: share, QK-norm, lr, warm-up
    assert [(r.start(800), r.steps(800)) for r in rec[::8]] == [(700, 100), (600, 200), (400, 400)]
    base = Recipe(1e-3, 0.1, "qk", 25.0)
    assert base.slug == "lr1e-03-wu10-normqk-r25"
    assert base.overrides(800) == ["train.steps=200", "schedule.warmup=20", "optim.lr=0.001", "drope.qk_norm=qk"]
    assert Recipe(3e-3, 0.04, "none", 12.5).warmup_steps(800) == 4
    with pytest.raises(ValueError, match="leaves 0 DroPE steps"):
        Recipe(1e-3, 0.1, "qk", 12.5).steps(4)
    st = study(rec, steps=800)
    assert st.rope_every() == 100 and st.steps // st.rope_every() == 8  # keeps 100..800: every drop step


def test_confirmation_seeds_are_fresh():
    sel = range(10)
    conf = rs.confirmation_seeds(sel, 10)
    assert conf == tuple(range(1000, 1010)) and not set(conf) & set(sel)
    with pytest.raises(ValueError, match="include selection seeds"):
        rs.confirmation_seeds(range(10), 3, start=8)
    assert rs.confirmation_seeds(range(10), 0) == ()


def rows(recipe, split, accs, rope=100.0, far=50.0, seeds=range(4)):
    return [SeedResult(recipe.slug, s, split, rope, a, {2: far, 4: far}) for s, a in zip(seeds, accs)]


def test_selection_reads_only_held_out_numbers():
    a, b = Recipe(1e-3, 0.1, "qk", 25.0), Recipe(3e-3, 0.1, "qk", 25.0)
    seeds = range(4)
    held = rows(a, HELDOUT, [100, 99, 99, 50]) + rows(b, HELDOUT, [100, 50, 50, 99])
    # The test split (and a seed outside the selection) would favour b; selection must not look at them.
    test = rows(a, TEST, [50, 50, 50, 50]) + rows(b, TEST, [100, 100, 100, 100], far=99.0)
    extra = rows(b, HELDOUT, [100], seeds=[7])
    chosen, ranking = rs.select(held + test + extra, [a, b], seeds, (1, 2, 4))
    assert chosen == a
    assert [(e["rank"], e["recipe"], e["summary"]["recovered"]) for e in ranking] == [(1, a, 3), (2, b, 2)]
    assert ranking[0]["summary"]["seeds"] == [0, 1, 2, 3]
    assert rs.select(held, [a, b], seeds, (1, 2, 4))[0] == a  # the same without the test rows
    # Only test numbers for a recipe: refused, never filled in from the test split.
    with pytest.raises(ValueError, match="no held-out result"):
        rs.select(rows(a, HELDOUT, [100] * 4) + rows(b, TEST, [100] * 4), [a, b], seeds, (1, 2, 4))
    # Ties on the recovery count: the higher mean held-out far accuracy, then accuracy at C, then grid order.
    tie = rows(a, HELDOUT, [100] * 4, far=60.0) + rows(b, HELDOUT, [100] * 4, far=70.0)
    assert rs.select(tie + rows(a, TEST, [100] * 4, far=99.0), [a, b], seeds, (1, 2, 4))[0] == b
    same = rows(a, HELDOUT, [100] * 4) + rows(b, HELDOUT, [100] * 4)
    assert rs.select(same, [a, b], seeds, (1, 2, 4))[0] == a
    assert rs.select(same, [b, a], seeds, (1, 2, 4))[0] == b


def test_recipe_summary_intervals():
    a = Recipe(1e-3, 0.1, "qk", 25.0)
    s = rs.recipe_summary(rows(a, TEST, [100, 99, 50, 100], far=80.0), (1, 2, 4))
    assert (s["recovered"], s["n"], s["recovered_seeds"]) == (3, 4, [0, 1, 3])
    assert (s["wilson_low"], s["wilson_high"]) == pytest.approx(stats.wilson(3, 4))
    assert s["far"]["2"]["mean"] == 80.0 and s["far"]["2"]["half_width"] == 0.0 and set(s["far"]) == {"2", "4"}
    assert s["accuracy"]["mean"] == pytest.approx(87.25) and s["accuracy"]["half_width"] > 0
    # the protocol's interval (stats.accuracy_interval), inside [0, 100] where the t interval is not
    acc = s["accuracy"]
    assert acc["mean"] + acc["half_width"] > 100 and 0 <= acc["interval_low"] <= 87.25 <= acc["interval_high"] <= 100
    assert (acc["interval_low"], acc["interval_high"]) == pytest.approx(
        stats.accuracy_interval([100, 99, 50, 100], None))
    assert (s["far"]["2"]["interval_low"], s["far"]["2"]["interval_high"]) == (80.0, 80.0)
    assert recovery.cell_text(acc) == f"87.2 [{acc['interval_low']:.1f}, {acc['interval_high']:.1f}]"


def test_recipe_summary_widens_to_the_pooled_query_counts():
    """With the files' query counts the interval contains the Wilson interval of the pooled counts: a seed set at
    100 % in every seed still shows the noise of its queries, and never leaves [0, 100]."""
    a = Recipe(1e-3, 0.1, "qk", 25.0)
    rows_ = [SeedResult(a.slug, s, TEST, 100.0, 100.0, {2: 0.0}, None, (1000, 1000), (1000, 1000),
                        {2: (0, 500)}) for s in range(3)]
    s = rs.recipe_summary(rows_, (1, 2))
    acc, far = s["accuracy"], s["far"]["2"]
    assert (acc["interval_low"], acc["interval_high"]) == pytest.approx(
        (stats.wilson_percent(3000, 3000)[0], 100.0)) and acc["interval_low"] < 100
    assert (acc["correct"], acc["count"]) == (3000, 3000) and s["rope_accuracy"]["count"] == 3000
    assert (far["interval_low"], far["interval_high"]) == pytest.approx((0.0, stats.wilson_percent(0, 1500)[1]))
    assert recovery.cell_text(acc).startswith("100.0 [99.9, 100.0]")
    # a seed without counts: the bootstrap over seeds alone
    mixed = rows_[:2] + [SeedResult(a.slug, 2, TEST, 100.0, 100.0, {2: 0.0})]
    assert rs.recipe_summary(mixed, (1, 2))["accuracy"]["interval_low"] == 100.0


def study(recipes, steps=8, **kw):
    base = dict(out=ROOT, recipes=tuple(recipes), seeds=(0, 1), confirm=(1000,), steps=steps, queries=8,
                multipliers=(1, 2), temperature="auto", fit_queries=8, tolerance=2.0, threads=1)
    return rs.Study(**{**base, **kw})




def assert_refused(tmp, capsys, cases):
    """Each (args, needle): exit 2 before any work, one line `recovery_study: ...` containing the needle."""
    for args, needle in cases:
        with pytest.raises(SystemExit) as e:
            rs.parse(["--out", str(tmp / "bad"), *map(str, args)])
        err = capsys.readouterr().err
        assert e.value.code == 2 and needle in err, (args, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("recovery_study: "), err
    assert not (tmp / "bad").exists()


def test_bad_options(tmp, capsys):
    assert_refused(tmp, capsys, ((("--seeds", 0), "--seeds must be >= 1"),
                                 (("--multipliers", "2,4"), "including 1"),
                                 (("--qk-norms", "qq"), "--qk-norms"),
                                 (("--shares", "100"), "leaves 800 DroPE steps"),
                                 (("--confirm-start", 3), "include selection seeds"),
                                 (("--temperature", "hot"), "--temperature"),
                                 (("--lrs", "x"), "--lrs"),
                                 (("--bin", tmp), "no drope-train, drope-eval there")))
    _, st = rs.parse(["--out", str(tmp / "q"), "--quick", "--bin", str(BIN)])
    assert (len(st.recipes), st.seeds, st.confirm, st.steps) == (2, (0, 1), (1000, 1001), 80)
    _, st = rs.parse(["--out", str(tmp / "full"), "--bin", str(BIN)])
    assert (len(st.recipes), len(st.seeds), len(st.confirm), st.steps, st.queries) == (24, 10, 10, 800, 1000)


def test_schedules_name_the_drop_step_and_the_steps():
    drops = ((400, 100), (400, 200), (400, 400), (600, 200), (600, 400), (700, 100), (700, 400))
    rec = rs.schedule_grid((3e-3,), (0.1,), ("qk",), drops, 800)
    assert [(r.start(800), r.steps(800)) for r in rec] == list(drops)
    assert [r.budget(800) for r in rec] == [500, 600, 800, 800, 1000, 800, 1100]
    assert [r.warmup_steps(800) for r in rec] == [10, 20, 40, 20, 40, 10, 40]
    # on the budget: the share recipe itself (same slug, so the runs are shared); off it: drop step and steps
    assert rec[2] == Recipe(3e-3, 0.1, "qk", 50.0) and rec[3] == Recipe(3e-3, 0.1, "qk", 25.0)
    assert rec[5].slug == "lr3e-03-wu10-normqk-r12p5"
    assert rec[0].slug == "lr3e-03-wu10-normqk-d400n100" and rec[6].slug == "lr3e-03-wu10-normqk-d700n400"
    assert len({r.slug for r in rec}) == 7 and all("." not in r.slug for r in rec)
    assert rec[0].overrides(800) == ["train.steps=100", "schedule.warmup=10", "optim.lr=0.003", "drope.qk_norm=qk"]
    assert rec[0].schedule_text(800) == "100 from step 400 (budget 500)" and rec[2].schedule_text(800) == "400 (50 %)"
    assert rec[0].doc(800)["budget"] == 500 and rec[0].doc(800)["drop_step"] == 400
    assert study(rec, steps=800).rope_every() == 100  # keeps 400, 600 and 700
    with pytest.raises(ValueError, match=r"drop step must be in 1\.\.799"):
        rs.schedule(3e-3, 0.1, "qk", 800, 100, 800).steps(800)
    # the order: pairs first, then QK-norm, learning rate, warm-up (as grid())
    two = rs.schedule_grid((1e-3, 3e-3), (0.1,), ("qk",), ((400, 100), (700, 400)), 800)
    assert [(r.lr, r.start(800)) for r in two] == [(1e-3, 400), (3e-3, 400), (1e-3, 700), (3e-3, 700)]


def test_bad_schedule_and_scratch_options(tmp, capsys):
    assert_refused(tmp, capsys, ((("--drops", "400"), "--drops"),
                                 (("--drops", "400:0"), "--drops"),
                                 (("--drops", "4OO:100"), "--drops"),
                                 (("--drops", "900:100"), "--drops: schedule 900:100"),
                                 (("--drops", "400:100", "--shares", "50"), "--drops and --shares"),
                                 (("--drops", "400:100,400:100"), "the grid repeats a recipe"),
                                 (("--scratch", "nope"), "--scratch"),
                                 (("--scratch", "alibi,alibi"), "--scratch"),
                                 (("--scratch", "alibi", "--scratch-seeds", 11), "--scratch-seeds must be in 1..10"),
                                 (("--scratch", "alibi", "--scratch-seeds", 0), "--scratch-seeds must be in 1..10")))
    _, st = rs.parse(["--out", str(tmp / "s"), "--bin", str(BIN), "--lrs", "3e-3", "--warmups", "0.1",
                      "--qk-norms", "qk", "--drops", "400:100,600:200", "--scratch", "alibi,rnope-swa"])
    assert [(r.start(800), r.steps(800)) for r in st.recipes] == [(400, 100), (600, 200)]
    assert st.scratch == ("alibi", "rnope-swa") and st.scratch_seeds == tuple(range(5))
    _, st = rs.parse(["--out", str(tmp / "t"), "--bin", str(BIN), "--seeds", "3", "--scratch", "alibi"])
    assert st.scratch_seeds == (0, 1, 2) and len(st.recipes) == 24  # fewer seeds than 5; the default grid
    _, st = rs.parse(["--out", str(tmp / "u"), "--bin", str(BIN)])
    assert st.scratch == () and st.scratch_seeds == ()
