"""studies/width_study.py and its library (drope_scripts.study) without binaries: the registered rows, the slope
test against scipy, the verdict rule's error rates by simulation, no verdict before the record is complete, the
verdicts on synthetic records, the provenance refusals, the CSV checks."""
import math
import pathlib
import random
import subprocess

import numpy as np
import pytest
from scipy import stats as sps

from conftest import git_repo_with_build
from drope_scripts import stats, study
from studies import width_study as ws


def test_registered_rows_are_the_protocols():
    rows = ws.registered()
    assert len(rows) == 3 * 2 * 4 * 4 == len(set(rows))
    assert {w for w, *_ in rows} == {128, 256, 384} and {b for _, b, *_ in rows} == {400, 1600}
    assert {s for _, _, s, _ in rows} == {0, 1, 2, 3}
    assert rows[0] == (128, 400, 0, "rope") and rows[-1] == (384, 1600, 3, "drope-lr1x")
    # seed-major order: every row of seed 0 before any of seed 1
    seeds = [s for _, _, s, _ in rows]
    assert seeds == sorted(seeds)
    assert ws.drop_step(400) == 300 and ws.recal_steps(1600) == 400
    # the page's parameter table
    assert [round(ws.parameters(w) / 1e4) / 100 for w in ws.WIDTHS] == [1.31, 4.2, 8.65]


def test_model_overrides():
    o = ws.model_overrides(256)
    assert "model.num_heads=8" in o and "model.num_kv_heads=4" in o and "model.intermediate_size=768" in o
    with pytest.raises(ValueError):
        ws.model_overrides(96)


def test_slope_matches_scipy():
    rng = np.random.default_rng(0)
    x = np.repeat(np.log2([128, 256, 384]), 4)
    y = 50 - 3 * x + rng.normal(0, 4, x.size)
    fit = study.slope(list(x), list(y))
    ref = sps.linregress(x, y)
    assert fit["slope"] == pytest.approx(ref.slope, rel=1e-12)
    assert fit["se"] == pytest.approx(ref.stderr, rel=1e-10)
    assert fit["p_two"] == pytest.approx(ref.pvalue, rel=1e-9)
    hi = fit["ci95"][1]
    assert hi - fit["slope"] == pytest.approx(sps.t.ppf(0.975, 10) * ref.stderr, rel=1e-9)
    assert fit["p_less"] + fit["p_greater"] == pytest.approx(1.0)
    assert study.slope([1, 1, 1], [1, 2, 3]) is None and study.slope([1, 2], [1, 2]) is None


def _rates(beta, sims=4000, sd=6.0, seed=1):
    rng = np.random.default_rng(seed)
    x = np.repeat(np.log2([128, 256, 384]), 4)
    counts = {"shrinks": 0, "grows": 0, "flat": 0}
    for _ in range(sims):
        fit = study.slope(list(x), list(40 + beta * x + rng.normal(0, sd, x.size)))
        for v in study.slope_verdict(fit, ws.MARGIN):
            if v in counts:
                counts[v] += 1
    return {k: v / sims for k, v in counts.items()}


def test_verdict_rule_error_rates():
    """The protocol's promise, by simulation at the design's 12 points: a wrong direction at most alpha/2 each way,
    'flat' at most alpha when |beta| is at the margin."""
    null = _rates(0.0)
    assert null["shrinks"] < 0.025 + 0.008 and null["grows"] < 0.025 + 0.008
    assert null["shrinks"] + null["grows"] < 0.05 + 0.01
    at_margin = _rates(ws.MARGIN, sd=2.0)
    assert at_margin["flat"] < 0.05 + 0.01
    assert at_margin["shrinks"] == 0.0
    strong = _rates(-15.0)
    assert strong["shrinks"] > 0.9  # and the rule has power where it should


def test_holm_matches_statsmodels_formula():
    p = [0.01, 0.04, 0.03, 0.005, math.nan]
    out = stats.holm(p)
    assert out[3] == pytest.approx(0.02) and out[0] == pytest.approx(0.03)
    assert out[2] == pytest.approx(0.06) and out[1] == pytest.approx(0.06) and math.isnan(out[4])


def synthetic(slope_q=-10.0, nope_offset=0.0, noise=1.0, seed=0, drop=None):
    """A complete record: RoPE 40 + width effect; gaps with a chosen width slope per arm."""
    rng = random.Random(seed)
    rows = []
    for w, b, s, arm in ws.registered():
        if drop and (w, b, s, arm) in drop:
            continue
        rope = 40.0 - math.log2(w) + (b == 400) * 10
        x = math.log2(w) - math.log2(256)
        gap = {"rope": 0.0, "nope": 50 + slope_q * x + nope_offset, "drope-quickstart": 50 + slope_q * x,
               "drope-lr1x": 45 + slope_q * x}[arm]
        if arm != "rope":
            gap += rng.gauss(0, noise)
        ppl = rope * (1 + gap / 100)
        rows.append({"width": w, "budget": b, "seed": s, "arm": arm, "ppl_c": ppl, "ppl_4c": 3 * ppl,
                     "ppl_rope": rope, "gap_pct": 100 * (ppl / rope - 1), "seconds": 10.0, "commit": "abc1234",
                     "cpu": "test CPU"})
    return rows


def test_no_verdict_until_complete():
    rows = synthetic(drop={(384, 1600, 3, "drope-lr1x")})
    md = ws.results_md(rows)
    assert "95 of 96" in md and "no verdict" in md and "Primary test" not in md


def test_verdicts_on_synthetic_records():
    md = ws.results_md(synthetic(slope_q=-12.0))
    assert "Primary test" in md and "**shrinks with width**" in md
    pr = ws.primary(synthetic(slope_q=-12.0))
    assert pr["verdict"] == ["shrinks"] and pr["fit"]["slope"] == pytest.approx(-12.0, abs=1.5)
    assert ws.primary(synthetic(slope_q=0.0, noise=0.5))["verdict"] == ["flat"]
    assert "grows" in ws.primary(synthetic(slope_q=12.0))["verdict"]
    # DroPE 8 points above NoPE at every width: the three paired tests read "falls short"
    sec = ws.secondary(synthetic(nope_offset=-8.0, noise=0.5))
    assert [o["reading"] for o in sec[:3]] == ["recalibration falls short of NoPE"] * 3
    assert sec[0]["estimate"] == pytest.approx(8.0, abs=1.0)
    assert all(not math.isnan(o["p_holm"]) and o["p_holm"] >= o["p"] for o in sec)


def test_report_writes_section_and_checks_markers(tmp):
    page = tmp / "page.md"
    page.write_text("# p\n<!-- width-study:begin -->\nold\n<!-- width-study:end -->\ntail\n")
    tab = study.Table(tmp / "rows.csv", ws.FIELDS)
    for r in synthetic()[:5]:
        tab.append(r)
    ws.report(tab, page, None)
    text = page.read_text()
    assert "5 of 96 registered rows" in text and text.endswith("tail\n") and "old" not in text
    assert study.section_of(page, "width-study").startswith("5 of 96")
    page.write_text("no markers\n")
    with pytest.raises(ValueError, match="width-study:begin"):
        ws.report(tab, page, None)


def test_table_refuses_bad_files(tmp):
    tab = study.Table(tmp / "rows.csv", ws.FIELDS)
    (tmp / "rows.csv").write_text("width,budget\n1,2\n")
    with pytest.raises(ValueError, match="header"):
        tab.read()
    (tmp / "rows.csv").write_text(",".join(ws.FIELDS) + "\nx,400,0,rope,1,1,1,0,1,c,cpu\n")
    with pytest.raises(ValueError, match=r"rows\.csv:2"):
        tab.read()
    with pytest.raises(ValueError, match="without"):
        study.Table(tmp / "new.csv", ws.FIELDS).append({"width": 1})


def test_snapshot_needs_a_clean_tree_and_a_fresh_build(tmp):
    repo, build = git_repo_with_build(tmp, ws.TOOLS)
    dest, commit = study.snapshot_tools(build, ws.TOOLS, tmp / "bin", repo)
    assert dest == tmp / "bin" / commit and all((dest / t).is_file() for t in ws.TOOLS)
    assert study.commit_stamp(repo) == commit
    (repo / "src" / "a.cpp").write_text("int b;\n")
    assert study.commit_stamp(repo).endswith("-dirty")
    with pytest.raises(study.ProvenanceError, match="differ from HEAD"):
        study.snapshot_tools(build, ws.TOOLS, tmp / "bin2", repo)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "y"],
                   check=True)
    import os
    import time

    old = time.time() - 3600
    for t in ws.TOOLS:
        os.utime(build / t, (old, old))
    with pytest.raises(study.ProvenanceError, match="older than the newest C\\+\\+ source"):
        study.snapshot_tools(build, ws.TOOLS, tmp / "bin3", repo)


def test_snapshot_holds_each_tool_against_its_own_sources(tmp):
    """In a Ninja build a tool is stale only when a source it is built from (an input, or a header its object
    included) is newer than it: an edit to a source another tool uses does not refuse the snapshot."""
    import os
    import time

    repo, build = git_repo_with_build(tmp, ())
    (repo / "include").mkdir()
    for name, text in (("src/b.cpp", "int b;\n"), ("include/h.h", "int h;\n")):
        (repo / name).write_text(text)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "y"],
                   check=True)
    # tool-a links a.o, whose compilation read include/h.h (recorded through a depfile); tool-b is b.cpp's.
    (build / "build.ninja").write_text(
        "rule cc\n  command = cp $in $out && printf '%s: %s %s\\n' $out $in ../repo/include/h.h > $out.d\n"
        "  depfile = $out.d\n  deps = gcc\n"
        "rule ld\n  command = cp $in $out\n"
        "build a.o: cc ../repo/src/a.cpp\nbuild tool-a: ld a.o\nbuild tool-b: ld ../repo/src/b.cpp\n")
    subprocess.run(["ninja", "-C", str(build)], check=True, capture_output=True)
    assert sorted(p.name for p in study.tool_sources(build, "tool-a", repo)) == ["a.cpp", "h.h"]
    now = time.time()
    os.utime(build / "tool-a", (now - 100, now - 100))
    os.utime(build / "tool-b", (now - 100, now - 100))
    for name in ("src/a.cpp", "include/h.h", "src/b.cpp"):
        os.utime(repo / name, (now - 200, now - 200))
    os.utime(repo / "src" / "b.cpp", (now, now))  # newer than tool-a, but tool-a is not built from it
    dest, _ = study.snapshot_tools(build, ("tool-a",), tmp / "bin", repo)
    assert (dest / "tool-a").is_file()
    with pytest.raises(study.ProvenanceError, match=r"tool-b is older than src/b\.cpp, which it is built from"):
        study.snapshot_tools(build, ("tool-b",), tmp / "bin-b", repo)
    os.utime(repo / "include" / "h.h", (now, now))  # a header tool-a's object included
    with pytest.raises(study.ProvenanceError, match=r"tool-a is older than include/h\.h"):
        study.snapshot_tools(build, ("tool-a",), tmp / "bin-a", repo)
    # The CMake files are no tool's input, yet they set every tool's flags: newer than a tool, it is stale.
    os.utime(repo / "include" / "h.h", (now - 200, now - 200))
    (repo / "CMakeLists.txt").write_text("project(x)\n")
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "z"],
                   check=True)
    with pytest.raises(study.ProvenanceError, match=r"tool-a is older than the CMake files"):
        study.snapshot_tools(build, ("tool-a",), tmp / "bin-c", repo)


def test_plan_counts_what_is_left():
    rows = synthetic()[:8]
    text = ws.plan_text(rows)
    assert "8 of 96 rows in; 88 runs to do" in text


def test_plan_estimates_from_the_measured_rates():
    """The time left is also estimated at the rates the rows measured (seconds a step, median per width), so the
    printed estimate is not only the protocol's guess."""
    rows = [dict(r, seconds=2.0 * (ws.recal_steps(r["budget"]) if ws.ARM[r["arm"]].drope else r["budget"]))
            for r in synthetic() if r["width"] == 128]
    assert ws.measured_sec_per_step(rows) == {128: 2.0}
    todo = [k for k in ws.registered() if k[0] == 256 or k[0] == 384]
    sec = sum(ws.SEC_PER_STEP[w] * (ws.recal_steps(b) if ws.ARM[a].drope else b) + ws.SEC_PER_EVAL
              for w, b, _, a in todo)
    text = ws.plan_text(rows)
    assert f"about {sec / 3600:.1f} h at the rates the rows in measured (median a step: 2.00 s at width 128; " \
           "the protocol's rate elsewhere)" in text, text
    assert ws.measured_sec_per_step([]) == {}


def test_committed_csv_is_well_formed():
    """Every committed row is a registered row from a clean commit."""
    if not ws.CSV_PATH.is_file():
        pytest.skip("no rows committed yet")
    rows = ws.table().read()
    reg = set(ws.registered())
    keys = [(r["width"], r["budget"], r["seed"], r["arm"]) for r in rows]
    assert len(keys) == len(set(keys)) and set(keys) <= reg
    assert all(not r["commit"].endswith("-dirty") and r["commit"] != "unknown" for r in rows)
    assert ws.results_md(rows) == study.section_of(pathlib.Path(ws.DOC_PATH), ws.SECTION)


def test_units_run_cheapest_first_and_each_once_across_workers(tmp_path, monkeypatch):
    order = ws.run_order()
    assert sorted(order) == sorted(ws.units())
    cost = [ws.unit_seconds(w, b) for _, w, b in order]
    assert cost == sorted(cost)
    assert order[0] == (0, 128, 400) and order[-1] == (3, 384, 1600)

    # a unit another worker holds is skipped; every other unit runs once, cheapest first
    ran = []
    monkeypatch.setattr(ws, "run_unit", lambda d, runs, tab, doc, plot, commit, cpu, unit: ran.append(unit) or 4)

    class FakeRuns:
        out = tmp_path

    (tmp_path / "locks").mkdir()
    held = order[3]
    with ws.claim(tmp_path / "locks" / f"w{held[1]}-b{held[2]}-s{held[0]}.lock") as mine:
        assert mine
        n = ws.run_all(None, FakeRuns(), None, None, None, "c0ffee", "cpu")
    assert held not in ran and ran == [u for u in order if u != held] and n == 4 * len(ran)
