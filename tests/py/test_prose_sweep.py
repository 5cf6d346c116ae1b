"""studies/prose_sweep.py on a fake runner (no binaries): the cells, the plan, the protocol's verdicts and cut rule,
the CSV rows and the skip of rows already there, the results section."""
import csv
import math
import pathlib

import pytest
from scipy import stats as sps

from drope_scripts import stats, study
from drope_scripts.driver import Driver
from studies import prose_sweep as ps

RS = ps.recipes(3e-3, 1e-3)


def cells(budgets=ps.BUDGETS):
    return ps.make_cells(budgets, RS)


class FakeRuns:
    """Perplexities from a formula: RoPE 70 + seed; DroPE a gap per recipe (and budget) plus a seed wiggle."""

    def __init__(self, gap, wiggle=0.3):
        self.gap, self.wiggle, self.calls = gap, wiggle, []

    def rope(self, budget, seed):
        self.calls.append(("rope", budget, seed))
        return 70.0 + seed

    def drope(self, cell, seed):
        self.calls.append((cell.id, seed))
        g = self.gap(cell) + self.wiggle * (-1) ** seed * (seed + 1)
        return (70.0 + seed) * (1 + g / 100)


def doc_page(tmp: pathlib.Path) -> pathlib.Path:
    p = tmp / "page.md"
    p.write_text(f"# page\n\n{ps.BEGIN}\nold\n{ps.END}\nafter\n")
    return p


def sweep(tmp, runs, cs, min_seeds=3, max_seeds=5, doc=None, on_row=None):
    d = Driver("test", tmp / "bin", width=3, jobs=1)
    return ps.Sweep(d, runs, cs, tmp / "rows.csv", doc, None, min_seeds, max_seeds, "abc1234", "test cpu", on_row)


def test_cells_recipes_and_steps():
    cs = cells()
    assert [c.id for c in cs] == [
        "b400-quickstart", "b800-quickstart",
        "b1600-quickstart", "b1600-share12.5", "b1600-lr1x", "b1600-lr3x", "b1600-continued",
        "b1600-noqk", "b1600-nope",
        "b3200-quickstart", "b3200-share12.5", "b3200-lr1x", "b3200-lr3x", "b3200-continued", "b3200-noqk",
        "b3200-nope"]
    by = {c.id: c for c in cs}
    assert (by["b400-quickstart"].steps, by["b400-quickstart"].drop_step) == (100, 300)  # the quickstart itself
    assert (by["b3200-share12.5"].steps, by["b3200-share12.5"].drop_step) == (400, 2800)
    assert by["b1600-lr1x"].recipe.lr == 3e-3 and by["b1600-lr3x"].recipe.lr == pytest.approx(9e-3)
    assert by["b1600-quickstart"].recipe.lr == 1e-3 and by["b1600-continued"].recipe.continued
    with pytest.raises(ValueError):
        ps.make_cells([4], RS)  # 12.5 % of 4 steps rounds to 0 recalibration steps


def test_the_recipes_come_from_the_quickstart_configs():
    rs = ps.recipes(ps.config_float(ps.ROOT / ps.PRETRAIN, "optim", "lr"),
                    ps.config_float(ps.ROOT / ps.DROPE, "optim", "lr"))
    assert rs["quickstart"].lr == 1e-3 and rs["lr1x"].lr == 3e-3 and rs["lr3x"].lr == pytest.approx(9e-3)


def test_verdicts_follow_the_protocol():
    worse = ps.verdict([18.0, 19.0, 20.0])
    assert worse["verdict"] == "DroPE worse" and worse["ci95"][0] > 2
    assert ps.verdict([-18.0, -19.0, -20.0])["verdict"] == "DroPE better"
    closed = ps.verdict([0.1, -0.2, 0.3, 0.0])
    assert closed["verdict"] == "closed"
    # TOST p = the larger of the two one-sided paired t-tests against the margins
    g = [0.1, -0.2, 0.3, 0.0]
    p = max(sps.ttest_1samp(g, -2, alternative="greater").pvalue, sps.ttest_1samp(g, 2, alternative="less").pvalue)
    assert closed["p_tost"] == pytest.approx(p) and closed["p_tost"] < 0.05
    assert ps.verdict([1.0, 5.0, 3.0])["verdict"] == "inconclusive"  # straddles the margin
    assert ps.verdict([3.0])["verdict"] == "inconclusive" and math.isnan(ps.verdict([3.0])["p_zero"])
    assert ps.decided([18.0, 19.0, 20.0]) and not ps.decided([18.0, 19.0])  # fewer than 3 seeds: never decided


def test_holm():
    assert stats.holm([0.01, 0.04, 0.03, math.nan]) == pytest.approx([0.03, 0.06, 0.06, math.nan], nan_ok=True)


def test_plan_of_a_fresh_sweep():
    cs = cells()
    units, sure, most = ps.plan(cs, [], 3, 5, 0.5, 10.0)
    assert [(s, b) for s, b, _, k in units if k == "sure"] == [(s, b) for s in range(3) for b in ps.BUDGETS]
    assert {k for s, _, _, k in units if s >= 3} == {"if undecided"}
    # per seed: RoPE 400+800+1600+3200 steps, DroPE 100+200+400+800 (quickstart) + 4200 (the axes); 16 evaluations
    assert sure == pytest.approx(3 * (17700 * 0.5 + 20 * 10.0))
    assert most == pytest.approx(5 * (17700 * 0.5 + 20 * 10.0))
    text = ps.plan_text(cs, [], 3, 5, 0.5, 10.0)
    assert ("seed 0, B = 3200: b3200-quickstart, b3200-share12.5, b3200-lr1x, b3200-lr3x, b3200-continued, "
            "b3200-noqk, b3200-nope") in text
    assert "seed 4, B = 400: b400-quickstart  (only if still undecided)" in text
    assert "estimated 7.5 h for the first 3 seeds, at most 12.6 h" in text


def test_rows_csv_and_resume_skip(tmp):
    cs = cells([8, 16, 32])  # tiny budgets: the same logic
    runs = FakeRuns(lambda c: 15.0)
    sw = sweep(tmp, runs, cs)
    # a committed row from an earlier session: (b16-quickstart, seed 1) is skipped
    ps.append_row(sw.csv, ps.make_row(cs[1], 1, 71.0, 80.0, "old", "old cpu"))
    sw.run()
    rows = ps.read_rows(sw.csv)
    assert len(rows) == len(cs) * 3 and ("b16-quickstart", 1) not in runs.calls
    assert sum(1 for c in runs.calls if c[0] == "rope") == 3 * 3  # RoPE once per (budget, seed), shared by the cells
    old = next(r for r in rows if r["cell"] == "b16-quickstart" and r["seed"] == 1)
    assert (old["ppl_drope"], old["gap_pct"], old["commit"]) == (80.0, pytest.approx(12.676), "old")
    with sw.csv.open() as f:
        assert tuple(next(csv.reader(f))) == ps.FIELDS
    # every cell is decided (gap ~15 %, little spread) after 3 seeds: a second run does nothing
    runs.calls.clear()
    assert sw.run() == 0 and runs.calls == []
    assert "seed 3" not in ps.plan_text(cs, rows, 3, 5, 0.5, 10.0)


def test_undecided_cells_get_more_seeds_and_stop_at_the_maximum(tmp):
    cs = cells([8, 16, 32])
    # b32-lr3x straddles the margin (inconclusive); the others are decided after 3 seeds
    runs = FakeRuns(lambda c: 2.0 if c.id == "b32-lr3x" else 20.0, wiggle=1.5)
    sweep(tmp, runs, cs).run()
    rows = ps.read_rows(tmp / "rows.csv")
    n = {c.id: len(ps.cell_gaps(rows, c.id)) for c in cs}
    assert n.pop("b32-lr3x") == 5 and set(n.values()) == {3}
    assert [c for c in runs.calls if c[0] == "rope" and c[2] >= 3] == [("rope", 32, 3), ("rope", 32, 4)]


def test_a_row_lands_with_the_page_and_the_callback(tmp):
    cs = cells([8, 16])
    page, seen = doc_page(tmp), []
    sweep(tmp, FakeRuns(lambda c: 10.0 if c.budget == 8 else 0.0, wiggle=0.1), cs, doc=page, on_row=seen.append).run()
    text = page.read_text()
    assert len(seen) == len(ps.read_rows(tmp / "rows.csv")) and text.endswith(f"{ps.END}\nafter\n")
    assert "| b8-quickstart | 8 | 2 (25 %) |" in text and "**DroPE worse** at 3 seeds" in text
    assert "**closed** at 3 seeds" in text and "Closed: b16-quickstart" in text
    assert "Per doubling of the budget it moves by -10.0 points" in text and "the gap narrows with budget" in text
    assert "measured at commit abc1234 on test cpu" in text


def test_the_page_has_its_markers_and_a_bad_csv_is_refused(tmp):
    text = ps.DOC_PATH.read_text()
    assert ps.BEGIN in text and ps.END in text
    bad = tmp / "bad.csv"
    bad.write_text("cell,seed\nx,1\n")
    with pytest.raises(ValueError, match="header"):
        ps.read_rows(bad)


def test_cli_plan_and_argument_errors(tmp, capsys):
    rows = tmp / "rows.csv"
    assert ps.study(["--plan", "--csv", str(rows)]) == 0
    out = capsys.readouterr().out
    assert "16 cells; seeds 0..2 for each, up to 5" in out and "b3200-continued" in out
    for bad in (["--budgets", "4x"], ["--min-seeds", "4", "--max-seeds", "3"], ["--jobs", "3"], ["--budgets", "4"]):
        with pytest.raises(SystemExit) as e:
            ps.study(["--plan", "--csv", str(rows), *bad])
        assert e.value.code == 2


def test_plot(tmp):
    pytest.importorskip("matplotlib")
    cs = cells([8, 16])
    sweep(tmp, FakeRuns(lambda c: 5.0), cs, min_seeds=2, max_seeds=2).run()
    assert ps.plot(cs, ps.read_rows(tmp / "rows.csv"), tmp / "p.png") and (tmp / "p.png").stat().st_size > 1000


def test_the_sweep_has_no_commit_option(tmp, capsys):
    """Rows and the page are the user's to commit: the sweep has no --commit and runs no git."""
    with pytest.raises(SystemExit) as e:
        ps.study(["--plan", "--csv", str(tmp / "rows.csv"), "--commit"])
    assert e.value.code == 2 and "--commit" in capsys.readouterr().err


def test_a_tool_that_cannot_start_is_tried_again(tmp):
    class Flaky(FakeRuns):
        fails = 2

        def drope(self, cell, seed):
            if cell.id == "b16-lr1x" and seed == 1 and self.fails:
                self.fails -= 1
                raise PermissionError(13, "Permission denied", "build/drope-eval")  # build/ being rebuilt
            return super().drope(cell, seed)

    cs = cells([8, 16])
    runs = Flaky(lambda c: 15.0)
    sw = sweep(tmp, runs, cs)
    sw.retry_wait = 0
    sw.run()
    assert len(ps.read_rows(sw.csv)) == 3 * len(cs) and runs.fails == 0
    assert runs.calls.count(("b16-quickstart", 1)) == 1  # its row had landed: not run again after the failure
    said = []
    with pytest.raises(PermissionError):
        study.retrying(lambda: (_ for _ in ()).throw(PermissionError("x")), said.append, tries=2, wait=0)
    assert len(said) == 1


def test_the_follow_up_recipe_is_its_own_holm_family():
    """noqk (the quickstart recipe without QK-norm) was added after the pre-registered cells: its comparison
    with the quickstart recipe is adjusted on its own and does not change the pre-registered family's p-values."""
    cs = cells()
    assert ps.recipes(3e-3, 1e-3)["noqk"].qk_norm == "none" and RS["quickstart"].qk_norm == "qk"
    rows = []
    for seed, (q, n, s12) in enumerate([(60.0, 30.0, 65.0), (58.0, 29.0, 66.0), (62.0, 31.0, 64.0)]):
        for cell, gap in (("b1600-quickstart", q), ("b1600-noqk", n), ("b1600-share12.5", s12)):
            rows.append({"cell": cell, "budget": 1600, "recipe": cell.split("-", 1)[1], "seed": seed,
                         "ppl_rope": 36.0, "ppl_drope": 36.0 * (1 + gap / 100), "gap_pct": gap, "commit": "abc1234",
                         "cpu": "test cpu"})
    pre = ps.comparisons(cs, rows)
    fup = ps.comparisons(cs, rows, "noqk")
    assert [o["cell"] for o in fup] == ["b1600-noqk", "b3200-noqk"]
    assert [o["cell"] for o in ps.comparisons(cs, rows, "nope")] == ["b1600-nope", "b3200-nope"]
    assert "b1600-noqk" not in [o["cell"] for o in pre]
    by = {o["cell"]: o for o in pre}
    share = by["b1600-share12.5"]
    assert share["n"] == 3 and share["p_holm"] == pytest.approx(share["p"])
    assert fup[0]["diff"] == pytest.approx(-30.0) and fup[0]["p_holm"] < 0.05
    md = ps.results_md(cs, rows)
    assert "b1600-noqk: -30.0 points over 3 seeds (95 % CI" in md and "QK-norm explains part of the gap" in md
    same = [dict(r, gap_pct=r["gap_pct"] + 30.0 + 0.5 * r["seed"]) if r["cell"] == "b1600-noqk" else r for r in rows]
    assert "QK-norm is not the cause" in ps.results_md(cs, same)
    one = [r for r in rows if not (r["cell"] == "b1600-noqk" and r["seed"] > 0)]
    assert "b1600-noqk: -30.0 points over 1 seed, inconclusive (one seed)" in ps.results_md(cs, one)


def test_nope_from_scratch_is_a_whole_budget_cell():
    by = {c.id: c for c in cells()}
    nope = by["b1600-nope"]
    assert nope.recipe.scratch and not nope.recipe.continued and (nope.steps, nope.drop_step) == (1600, 0)
    # the RoPE runs keep their checkpoints at the DroPE drop steps only (unchanged by the scratch cells)
    runs = ps.Runs.__new__(ps.Runs)
    runs.cells = cells()
    assert "train.checkpoint_every=200" in runs._rope_overrides(1600, 0)
    rows = [{"cell": f"b1600-{r}", "budget": 1600, "recipe": r, "seed": k, "ppl_rope": 36.0,
             "ppl_drope": 36.0 * (1 + g / 100), "gap_pct": g, "commit": "abc1234", "cpu": "test cpu"}
            for k in range(3) for r, g in (("quickstart", 55.0 + k), ("nope", 54.0 + 0.5 * k))]
    assert "DroPE is at NoPE's level" in ps.results_md(cells(), rows)


def test_an_inconclusive_follow_up_gets_seeds_for_both_of_its_cells(tmp):
    """The extension: a follow-up comparison still inconclusive after 3 seeds gives its follow-up cell and the
    quickstart cell of its budget the next seed (up to 5), though both cells' own verdicts are decided; a follow-up
    comparison read as decided (here b16-noqk, 'not the cause') and the pre-registered cells stop at 3."""
    cs = cells([8, 16])

    def gap(c):  # b16-nope: +9 points on average with a spread of ±6 points: inconclusive against the quickstart
        return 20.0 + (9.0 if c.id == "b16-nope" else 0.0)

    runs = FakeRuns(gap, wiggle=0.0)
    spread = {0: 0.0, 1: 12.0, 2: -6.0, 3: 3.0, 4: 4.0}
    base = runs.drope
    runs.drope = lambda cell, seed: base(cell, seed) * (1 + (spread[seed] / 100 if cell.id == "b16-nope" else 0))
    sweep(tmp, runs, cs).run()
    rows = ps.read_rows(tmp / "rows.csv")
    n = {c.id: len(ps.cell_gaps(rows, c.id)) for c in cs}
    assert n.pop("b16-nope") == 5 and n.pop("b16-quickstart") == 5 and set(n.values()) == {3}
    assert ps.open_follow_ups(cs, [r for r in rows if r["seed"] < 3]) == {"b16-nope", "b16-quickstart"}
    # the pre-registered comparisons read the seeds common to both cells: unchanged by the extra quickstart seeds
    assert {o["n"] for o in ps.comparisons(cs, rows)} == {3}


def test_the_follow_ups_are_read_sequentially_at_pococks_level():
    """A comparison at Holm p between Pocock's per-look level (looks at 3, 4, 5 seeds) and 0.05 is decided by the
    uncorrected reading only; the sequential reading keeps it open, and the extension gives it the next seed."""
    assert pytest.approx(stats.pocock_alpha([3, 4, 5])) == ps.look_alpha() and 0.022 < ps.look_alpha() < 0.03
    cs = cells()
    rows = []
    for seed, (q, n) in enumerate([(60.0, 57.0), (58.0, 51.0), (62.0, 48.0), (61.0, 52.0)]):
        for cell, gap in (("b3200-quickstart", q), ("b3200-nope", n)):
            rows.append({"cell": cell, "budget": 3200, "recipe": cell.split("-", 1)[1], "seed": seed,
                         "ppl_rope": 32.0, "ppl_drope": 32.0 * (1 + gap / 100), "gap_pct": gap,
                         "commit": "abc1234-dirty", "cpu": "test cpu"})
    o = next(o for o in ps.comparisons(cs, rows, "nope") if o["cell"] == "b3200-nope")
    assert ps.look_alpha() < o["p_holm"] < 0.05, o
    e = next(e for e in ps.looks(cs, rows, "nope") if e["cell"] == "b3200-nope")
    assert e["final"]["reading"].endswith(": inconclusive") and e["final"]["n"] == 4
    assert "recalibration falls short of NoPE" in ps.follow_up_reading(o, rows)
    assert {"b3200-nope", "b3200-quickstart"} <= ps.open_follow_ups(cs, rows)
    md = ps.results_md(cs, rows)
    assert "Pocock's nominal level" in md and "Uncorrected (each look at 0.05" in md
    assert "8 of 8 rows from a dirty build (commit ending in -dirty), not reproducible from a commit" in md
