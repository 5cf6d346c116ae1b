"""Offset-key retrieval over seeds (scripts/drope_scripts/offset_key_report.py and offset_key.py): aggregation,
intervals inside [0, 100] against scipy and hand values, the claim verdicts (a)–(f) under the statistics protocol
(docs/design.md#statistics-protocol) on constructed numbers (each agreeing, disagreeing and inconclusive; (e) at
the ceiling), the merged per-(method, seed) results file, and the reproduction's knob."""
import csv
import io
import json
import math
import pathlib

import numpy as np
import pytest
from scipy import stats as sps

from drope_scripts import offset_key as ok
from drope_scripts import offset_key_report as okr
from drope_scripts import results, stats
from drope_scripts.driver import ROOT, Driver
from studies import quickstart, reproduce

C = 128
T975_2 = 0.95 * math.sqrt(2 / (1 - 0.95 ** 2))  # t(0.975, 2 dof) in closed form (a·√(2/(1−a²)), a = 0.95)


def result_doc(label, rows, seed=0, c=C, **method):
    """An offset-key results file as drope-eval writes it; rows: {length: (accuracy, far accuracy or None)}."""
    rs = [{"length": L, "accuracy": a, "far_accuracy": f, "queries": 1000, "far_queries": 0 if f is None else 1000,
           "correct": round(10 * a), "far_correct": 0 if f is None else round(10 * f)} for L, (a, f) in rows.items()]
    return {"schema": "drope.results", "schema_version": 1, "kind": "offset-key", "seed": seed, "far_threshold": c,
            "train_length": c, "index_split": "test", "method": {"label": label, "train_length": c, **method},
            "results": rs, "summary": okr.summary_of(rs)}


def write(path, doc):
    path.write_text(json.dumps(doc))
    return path


# Means of a table on which every claim agrees: accuracy at C, far accuracy at 2C, 4C, 8C (None: not evaluated).
# NTK and YaRN (with and without a temperature) retrieve no far needle, like the cropped baseline.
GOOD = {okr.ROPE: (100, 95, 25, 3), okr.PI: (None, 80, 60, 40), okr.NTK: (None, 8, 7, 6),
        okr.YARN: (None, 7, 6, 6), okr.PI_T: (None, 82, 62, 42), okr.NTK_T: (None, 9, 8, 7),
        okr.YARN_T: (None, 8, 7, 7), okr.CROP: (None, 6, 6, 6), okr.NOPE_T: (50, 54, 54, 53),
        okr.DROPE_T: (99.3, 99, 98, 97), okr.DROPE_0: (99.3, 90, 60, 40)}
# The old pilot's table (YaRN between RoPE's 4C score and 100): agreed with the old (c).
PILOT = {okr.ROPE: (98, 89, 49, 16), okr.PI: (None, 70, 54, 44), okr.NTK: (None, 97, 88, 62),
         okr.YARN: (None, 91, 75, 70), okr.NOPE_T: (88, 84, 71, 58), okr.DROPE_T: (96, 95, 90, 89),
         okr.DROPE_0: (96, 79, 67, 50)}
NOISE5 = (-1.0, -0.5, 0.0, 0.5, 1.0)  # per seed, rotated by method so that differences vary over seeds


def build(tmp_path, table=GOOD, noise=NOISE5, override=None, values=None, drop=()):
    """Per-seed result files of `table` (mean + noise per seed, clamped to [0, 100]; `override` {(label, mult):
    mean}; `values` {(label, mult): per-seed values}), aggregated."""
    means = {label: list(v) for label, v in table.items() if label not in drop}
    for (label, mult), v in (override or {}).items():
        means[label][{1: 0, 2: 1, 4: 2, 8: 3}[mult]] = v
    n = len(noise)
    files = {}
    for i, (label, row) in enumerate(means.items()):
        for seed in range(n):
            def at(mult, mean, i=i, seed=seed, label=label):
                if (label, mult) in (values or {}):
                    return values[label, mult][seed]
                return None if mean is None else min(100.0, max(0.0, mean + noise[(seed + i) % n]))
            at_c, *far = (at(m, v) for m, v in zip((1, 2, 4, 8), row))
            rows = {} if at_c is None else {C: (at_c, None)}
            rows.update({m * C: (95.0, f) for m, f in zip((2, 4, 8), far) if f is not None or row[0] is None})
            rows = {k: v for k, v in rows.items() if not (v[1] is None and k != C)}
            slug = label.lower().replace("+", "-").replace(" ", "-").replace("=", "")
            files.setdefault(label, []).append(write(tmp_path / f"{slug}-s{seed}.json",
                                                     result_doc(label, rows, seed)))
    return okr.aggregate(files, C, (1, 2, 4, 8), (400, 800))


def verdicts(doc):
    return {cl["letter"]: cl["verdict"] for cl in doc["claims"]}


def claim(doc, letter):
    return next(cl for cl in doc["claims"] if cl["letter"] == letter)


def cell(doc, label, length):
    return next(c for m in doc["methods"] if m["label"] == label for c in m["cells"] if c["length"] == length)


# ---- aggregation -------------------------------------------------------------------------------------------

def test_mean_and_intervals_match_scipy_and_hand_values(tmp_path):
    values = [45.0, 50.0, 58.0]
    files = [write(tmp_path / f"r{s}.json", result_doc("RoPE", {C: (98.0 + s, None), 4 * C: (60.0, v)}, s))
             for s, v in enumerate(values)]
    doc = okr.aggregate({"RoPE": files}, C, (1, 4), (200, 800))
    far = cell(doc, "RoPE", 4 * C)["far_accuracy"]
    std = math.sqrt((36 + 1 + 49) / 2)  # deviations -6, -1, +7 from 51
    half = T975_2 * std / math.sqrt(3)
    assert far["n"] == 3 and far["mean"] == pytest.approx(51.0) and far["std"] == pytest.approx(std)
    assert far["half_width"] == pytest.approx(half, abs=1e-9) and half == pytest.approx(16.28958, abs=1e-5)
    lo, hi = sps.t.interval(0.95, 2, loc=51.0, scale=sps.sem(values))
    assert (far["ci_low"], far["ci_high"]) == pytest.approx((lo, hi), abs=1e-9)
    assert (far["min"], far["max"], far["values"], far["seeds"]) == (45.0, 58.0, values, [0, 1, 2])
    # the table's interval: the bootstrap over seeds widened to the Wilson interval of 1,530 / 3,000 far queries
    blo, bhi = stats.bootstrap_mean(values)
    w = sps.binomtest(450 + 500 + 580, 3000).proportion_ci(method="wilson")
    assert (far["correct"], far["count"]) == (1530, 3000)
    assert far["interval_low"] == pytest.approx(min(blo, 100 * w.low)) and far["interval_high"] == pytest.approx(
        max(bhi, 100 * w.high))
    at_c = cell(doc, "RoPE", C)
    assert at_c["accuracy"]["mean"] == pytest.approx(99.0) and at_c["far_accuracy"] is None
    assert at_c["accuracy"]["interval_high"] <= 100.0  # the t interval of 98, 99, 100 would reach 101.5
    assert at_c["accuracy"]["ci_high"] == pytest.approx(99.0 + T975_2 / math.sqrt(3))
    assert at_c["queries"] == 3000 and cell(doc, "RoPE", 4 * C)["far_queries"] == 3000
    assert doc["kind"] == okr.AGGREGATE_KIND and doc["lengths"] == [C, 4 * C] and doc["confidence"] == 0.95


@pytest.mark.parametrize("vals", [[100.0, 0.0, 100.0, 0.0, 33.0], [46.6] * 4 + [0.0], [0.0] * 5, [100.0] * 5,
                                  [100.0, 99.7, 100.0, 100.0, 100.0]])
def test_intervals_never_leave_0_100(tmp_path, vals):
    files = [write(tmp_path / f"d{s}.json", result_doc("DroPE c=0", {C: (v, None), 8 * C: (v, v)}, s))
             for s, v in enumerate(vals)]
    doc = okr.aggregate({"DroPE c=0": files}, C, (1, 8), (400, 800))
    for length, metric in ((C, "accuracy"), (8 * C, "far_accuracy")):
        d = cell(doc, "DroPE c=0", length)[metric]
        assert 0.0 <= d["interval_low"] <= d["mean"] <= d["interval_high"] <= 100.0
    if vals == [100.0] * 5:  # the queries' noise at the ceiling: Wilson of 5,000 / 5,000, not "± 0.0"
        d = cell(doc, "DroPE c=0", C)["accuracy"]
        assert d["interval_high"] == 100.0 and d["interval_low"] == pytest.approx(99.923, abs=1e-3)
        assert okr.Cell.of(d).text() == "100.0 [99.9, 100.0]"


def test_one_seed_has_no_t_interval_and_unevaluated_lengths_are_null(tmp_path):
    f = write(tmp_path / "pi.json", result_doc("RoPE+PI", {2 * C: (90.0, 70.0)}))
    doc = okr.aggregate({"RoPE+PI": [f]}, C, (1, 2), (200, 800))
    assert cell(doc, "RoPE+PI", C) == {"length": C, "accuracy": None, "far_accuracy": None, "queries": 0,
                                       "far_queries": 0}
    far = cell(doc, "RoPE+PI", 2 * C)["far_accuracy"]
    assert (far["n"], far["mean"], far["std"]) == (1, 70.0, 0.0)
    assert far["half_width"] is None and far["ci_low"] is None and far["ci_high"] is None
    assert (far["interval_low"], far["interval_high"]) == pytest.approx(stats.wilson_percent(700, 1000))
    json.dumps(doc, allow_nan=False)  # no NaN or infinity in the document


def test_inconsistent_seeds_are_refused(tmp_path):
    a = write(tmp_path / "a.json", result_doc("RoPE", {C: (99.0, None), 2 * C: (90.0, 80.0)}))
    b = write(tmp_path / "b.json", result_doc("RoPE", {C: (98.0, None)}, seed=1))
    with pytest.raises(results.ResultsError, match=r"b.json: no result at length 256"):
        okr.aggregate({"RoPE": [a, b]}, C, (1, 2), (200, 800))
    wrong = write(tmp_path / "w.json", result_doc("RoPE", {256: (99.0, None)}, c=256))
    with pytest.raises(results.ResultsError, match="train_length 256, expected C = 128"):
        okr.aggregate({"RoPE": [wrong]}, C, (1, 2), (200, 800))
    with pytest.raises(results.ResultsError, match="a 'ppl' results file"):
        okr.aggregate({"RoPE": [write(tmp_path / "p.json", {**result_doc("RoPE", {}), "kind": "ppl"})]}, C, (1,),
                     (200, 800))
    with pytest.raises(results.ResultsError, match="seed 0 is already in another file of RoPE"):
        okr.aggregate({"RoPE": [a, a]}, C, (1, 2), (200, 800))
    over = result_doc("RoPE", {C: (101.0, None)})
    with pytest.raises(results.ResultsError, match=r"over.json: accuracy 101.0 at length 128 is outside \[0, 100\]"):
        okr.aggregate({"RoPE": [write(tmp_path / "over.json", over)]}, C, (1,), (200, 800))
    bad = result_doc("RoPE", {C: (99.0, None), 2 * C: (90.0, 80.0)})
    bad["results"][1]["far_correct"] = 400  # 40 %, not 80 %
    with pytest.raises(results.ResultsError, match=r"bad.json: far_correct / far_queries = 400 / 1000 at length 256 "
                                                   "does not give its far_accuracy 80.0"):
        okr.aggregate({"RoPE": [write(tmp_path / "bad.json", bad)]}, C, (1, 2), (200, 800))


def test_table_csv_and_claim_lines(tmp_path):
    doc = build(tmp_path)
    text = okr.markdown(doc, "runs/x/offset-key")
    lines = text.splitlines()
    assert "| method | C = 128 (all) | 2C = 256 (far) | 4C = 512 (far) | 8C = 1024 (far) |" in lines
    row = next(l for l in lines if l.startswith("| RoPE+PI |"))
    assert row.startswith("| RoPE+PI | – | 80.0 [")
    assert "5 seeds: mean over seeds [95 % interval: the bootstrap over seeds widened to the Wilson interval" in text
    assert "Plot: `runs/x/offset-key/far.png`" in text
    claim_lines = [l for l in lines if l.startswith("claim (")]
    assert [l[7] for l in claim_lines] == list("abcdef")
    assert all(": agrees (" in l for l in claim_lines), claim_lines
    e = next(l for l in claim_lines if l.startswith("claim (e)"))
    assert e.startswith("claim (e) DroPE recovers RoPE's in-context accuracy (within 2 points) with 50 % (400 of 800 "
                        "steps recalibrating) of the budget: agrees (DroPE − RoPE at C: TOST (paired t), H1: |mean d| "
                        "< 2, t(4) = ")
    assert "- (c) equivalence, TOST (paired t): |far(X, L) − far(RoPE crop, L)| < 5" in text
    assert "α = 0.05. Each one-sided test at α / 2" in text and "Holm-adjusted as one family" in text
    rows = list(csv.DictReader(io.StringIO(okr.csv_text(doc))))
    r = next(r for r in rows if (r["method"], r["length"], r["metric"]) == ("DroPE c=0", "1024", "far_accuracy"))
    assert float(r["mean"]) == 40.0 and r["seeds"] == "0 1 2 3 4" and len(r["values"].split()) == 5
    assert 0 <= float(r["interval_low"]) < 40 < float(r["interval_high"]) <= 100
    assert not any(r["method"] == "RoPE+PI" and r["length"] == "128" for r in rows)
    json.dumps(doc, allow_nan=False)


# ---- claims ------------------------------------------------------------------------------------------------

def test_every_claim_can_agree(tmp_path):
    doc = build(tmp_path)
    assert verdicts(doc) == dict.fromkeys("abcdef", "agrees")
    for cl in doc["claims"]:
        assert cl["p"] < 0.05 and ("paired t" in cl["test"] or "TOST" in cl["test"]), cl


@pytest.mark.parametrize("letter, override", [
    ("a", {(okr.ROPE, 4): 95, (okr.ROPE, 8): 95}),  # falls by 5 < 10 points: no collapse
    ("b", {(okr.PI, 2): 99}),  # PI above RoPE at 2C
    ("c", {(okr.YARN, 2): 90}),  # YaRN retrieves far needles at 2C: not a cropped context
    ("d", {(okr.YARN_T, 8): 99.9}),  # YaRN with its own temperature above DroPE at 8C
    ("e", {(okr.DROPE_T, 1): 95}),  # 4.7 points below RoPE
    ("f", {(okr.DROPE_0, 8): 99.9}),  # the temperature loses at 8C
])
def test_each_claim_can_disagree(tmp_path, letter, override):
    doc = build(tmp_path, override=override)
    v = verdicts(doc)
    assert v[letter] == "disagrees", claim(doc, letter)
    assert all(x == "agrees" for k, x in v.items() if k != letter), v
    assert claim(doc, letter)["p"] < 0.05


@pytest.mark.parametrize("letter, override", [
    ("b", {(okr.PI, 2): 93}),  # RoPE 2 points above PI at 2C: at the margin, no evidence either way
    ("d", {(okr.PI, 4): 96}),  # DroPE 98 against PI 96 at 4C: at the margin
    ("f", {(okr.DROPE_0, 4): 96}),
    ("c", {(okr.NTK, 8): 11}),  # 5 points above the crop at 8C, within the noise
])
def test_each_claim_can_be_inconclusive(tmp_path, letter, override):
    v = verdicts(build(tmp_path, override=override))
    assert v[letter] == "inconclusive"
    assert all(x == "agrees" for k, x in v.items() if k != letter), v


def test_e_is_saturated_at_the_ceiling_agrees_below_it_and_fails_three_points_below(tmp_path):
    rope = [100.0] * 5
    # both sides >= 99.5 %: agreement there would only show that both saturate
    for drope in ([100.0, 99.7, 100.0, 99.9, 100.0], rope):
        e = claim(build(tmp_path, values={(okr.ROPE, 1): rope, (okr.DROPE_T, 1): drope}), "e")
        assert e["verdict"] == "saturated, not testable" and e["p"] is None and "both sides ≥ 99.5 %" in e["test"]
    near = {(okr.ROPE, 1): rope, (okr.DROPE_T, 1): [99.0, 98.7, 99.0, 98.9, 99.2]}
    e = claim(build(tmp_path, values=near), "e")
    assert e["verdict"] == "agrees" and e["p"] < 1e-3 and "TOST (paired t), H1: |mean d| < 2" in e["test"]
    below = {(okr.ROPE, 1): rope, (okr.DROPE_T, 1): [97.0, 96.7, 97.0, 96.9, 97.0]}
    e = claim(build(tmp_path, values=below), "e")
    assert e["verdict"] == "disagrees" and e["p"] < 1e-3 and "H1: mean d < -2" in e["test"]


def test_d_is_saturated_where_both_sides_are_at_the_ceiling(tmp_path):
    # YaRN at 99.6 against DroPE at 100 at 4C: a 0.4-point gap at the ceiling decides nothing, either way
    top = [100.0] * 5
    sat = {(okr.DROPE_T, 4): top, (okr.YARN, 4): [99.5, 99.6, 99.7, 99.6, 99.6]}
    d = claim(build(tmp_path, values=sat), "d")
    assert d["verdict"] == "saturated, not testable" and "DroPE − YaRN at 4C" in d["test"]
    # the same gap below the ceiling is tested, against the 2-point margin: DroPE does not beat it by 2 points
    low = {(okr.DROPE_T, 4): [98.0] * 5, (okr.YARN, 4): [97.5, 97.6, 97.7, 97.6, 97.6]}
    d = claim(build(tmp_path, values=low), "d")
    assert d["verdict"] == "disagrees" and "DroPE − YaRN at 4C" in d["test"] and "H1: mean d < 2" in d["test"]


def test_c_no_longer_agrees_for_yarn_between_ropes_4c_score_and_100(tmp_path):
    # the 5-seed reproduction's YaRN: 98.3 at 4C, RoPE 23.3, RoPE at C 100 (the old criterion said agrees)
    doc = build(tmp_path, override={(okr.YARN, 2): 100, (okr.YARN, 4): 98.3, (okr.YARN, 8): 75.8,
                                    (okr.ROPE, 4): 23.3})
    c = claim(doc, "c")
    assert c["verdict"] == "disagrees" and "RoPE+YaRN − crop at" in c["test"] and "(× 6 cells)" in c["test"]
    # without the measured crop, YaRN far above the 6.25 % bound still disagrees; crop-like numbers cannot agree
    doc = build(tmp_path, override={(okr.YARN, 4): 98.3}, drop=(okr.CROP,))
    c = claim(doc, "c")
    assert c["verdict"] == "disagrees" and "one-sample t, H1: mean far(RoPE+YaRN) > 11.2" in c["test"]
    c = claim(build(tmp_path, drop=(okr.CROP,)), "c")
    assert c["verdict"] == "inconclusive" and "RoPE crop not measured" in c["test"]
    assert verdicts(build(tmp_path, table=PILOT))["c"] == "disagrees"


def test_d_needs_the_scaled_methods_with_their_own_temperature(tmp_path):
    d = claim(build(tmp_path, drop=okr.SCALED_T), "d")
    assert d["verdict"] == "inconclusive" and "RoPE+PI+temp far accuracy at 4C was not measured" in d["test"]
    # a measured disagreement decides even with cells missing
    d = claim(build(tmp_path, drop=okr.SCALED_T, override={(okr.YARN, 8): 99.9}), "d")
    assert d["verdict"] == "disagrees" and "YaRN at 8C" in d["test"]


def test_one_seed_decides_nothing(tmp_path):
    doc = build(tmp_path, noise=(0.0,))
    assert verdicts(doc) == dict.fromkeys("abcdef", "inconclusive")
    assert all("one seed: no test over seeds" in cl["test"] for cl in doc["claims"]), doc["claims"]
    text = okr.markdown(doc, "x")
    assert "1 seed: the value and, where the file has the query counts, their Wilson 95 % interval" in text
    assert "| RoPE | 100.0 [99.6, 100.0] | 95.0 [93.5, 96.2] |" in text


def test_missing_methods_make_a_claim_inconclusive(tmp_path):
    v = verdicts(build(tmp_path, drop=(okr.DROPE_0, okr.NOPE_T)))  # the quickstart without c = 0
    assert v == {**dict.fromkeys("abcde", "agrees"), "f": "inconclusive"}
    doc = build(tmp_path, override={(okr.ROPE, 4): None})
    a = claim(doc, "a")
    assert a["verdict"] == "inconclusive" and a["test"] == "RoPE C − 4C: RoPE far accuracy at 4C was not measured"


def test_pairing_uses_the_seeds_in_common(tmp_path):
    # NoPE on the first seed only and a method whose files come in another order pair by seed, not by position
    files = {}
    for label, vals in ((okr.ROPE, [100.0, 100.0, 100.0]), (okr.DROPE_T, [99.0, 99.4, 99.2])):
        for s in (2, 0, 1) if label == okr.DROPE_T else (0, 1, 2):
            files.setdefault(label, []).append(write(tmp_path / f"{label}-{s}.json".replace("+", "_"),
                                                     result_doc(label, {C: (vals[s], None)}, s)))
    doc = okr.aggregate(files, C, (1,), (400, 800))
    assert cell(doc, okr.DROPE_T, C)["accuracy"]["seeds"] == [2, 0, 1]
    t = okr.Table(doc)
    x, y = okr._paired(t.acc(okr.DROPE_T), t.acc(okr.ROPE))
    assert x == [99.0, 99.4, 99.2] and y == [100.0] * 3
    e = claim(doc, "e")
    tost, _, _ = stats.tost_paired(x, y, 2.0)
    assert e["p"] == pytest.approx(tost.p) and e["verdict"] == "agrees"
    assert np.isclose(e["statistic"], tost.statistic)


# ---- merged per-(method, seed) files -----------------------------------------------------------------------

def test_merge_per_length_files(tmp_path):
    parts = [write(tmp_path / f"yarn-L{m * C}.json",
                   result_doc("RoPE+YaRN", {m * C: (90.0, 80.0 - m)}, seed=2, factor=m, variant=f"yarn:{m}",
                              rope_scaling="yarn"))
             for m in (4, 2, 8)]  # out of order on purpose
    doc = ok.merge(parts, "RoPE+YaRN")
    out = tmp_path / "rope-yarn-s2.json"
    ok.write_atomic(out, ok.dump(doc))
    got = results.load(out, "offset-key")
    assert (got["schema"], got["schema_version"], got["kind"]) == ("drope.results", 1, "offset-key")
    assert got["method"] == {"label": "RoPE+YaRN", "train_length": C, "rope_scaling": "yarn"}
    assert (got["seed"], got["far_threshold"], got["train_length"], got["index_split"]) == (2, C, C, "test")
    assert [(r["length"], r["factor"], r["far_accuracy"]) for r in got["results"]] == [
        (256, 2, 78.0), (512, 4, 76.0), (1024, 8, 72.0)]
    assert set(got["results"][0]) == {"length", "accuracy", "far_accuracy", "queries", "far_queries", "correct",
                                      "far_correct", "factor"}
    assert got["summary"] == {"acc@256": 90.0, "far@256": 78.0, "acc@512": 90.0, "far@512": 76.0, "acc@1024": 90.0,
                              "far@1024": 72.0}
    assert got["merged_from"] == [str(p) for p in parts]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left
    # a merged file aggregates like drope-eval's own
    agg = okr.aggregate({"RoPE+YaRN": [out]}, C, (1, 2, 4, 8), (200, 800))
    assert cell(agg, "RoPE+YaRN", C)["accuracy"] is None and cell(agg, "RoPE+YaRN", 8 * C)["far_accuracy"]["mean"] == 72


def test_merge_refuses_mismatched_parts(tmp_path):
    a = write(tmp_path / "a.json", result_doc("RoPE+PI", {256: (90.0, 80.0)}, seed=0))
    with pytest.raises(results.ResultsError, match=r"b.json: seed 1 differs from 0 in .*a.json"):
        ok.merge([a, write(tmp_path / "b.json", result_doc("RoPE+PI", {512: (90.0, 80.0)}, seed=1))], "RoPE+PI")
    with pytest.raises(results.ResultsError, match="expected the results of one length, found 2"):
        ok.merge([write(tmp_path / "c.json", result_doc("RoPE+PI", {256: (1.0, 1.0), 512: (1.0, 1.0)}))], "x")
    with pytest.raises(results.ResultsError, match="length 256 is already in another file"):
        ok.merge([a, a], "RoPE+PI")
    with pytest.raises(ValueError, match="nothing to merge"):
        ok.merge([], "RoPE+PI")


def test_merged_summary_has_no_null_without_far_needles():
    rows = [{"length": 128, "accuracy": 99.0, "far_accuracy": None}, {"length": 256, "accuracy": 90.0,
                                                                      "far_accuracy": 80.0}]
    assert okr.summary_of(rows) == {"acc@128": 99.0, "acc@256": 90.0, "far@256": 80.0}


def test_write_atomic_keeps_the_old_file_on_failure(tmp_path):
    p = tmp_path / "r.json"
    ok.write_atomic(p, "old")
    with pytest.raises(TypeError):
        ok.write_atomic(p, 42)
    assert p.read_text() == "old" and [x.name for x in tmp_path.iterdir()] == ["r.json"]


# ---- the experiment's plan and the reproduction's knob -----------------------------------------------------

def test_plans(monkeypatch):
    monkeypatch.chdir(ROOT)  # the configs are named relative to the repository root, as the pipelines run
    assert [s.label for s in quickstart.OFFSET_KEY.specs()] == [okr.ROPE, okr.PI, okr.NTK, okr.YARN, okr.CROP,
                                                                okr.DROPE_T, okr.DROPE_0]
    assert quickstart.OFFSET_KEY.seeds == (0,) and quickstart.OFFSET_KEY.queries >= 1000
    assert [s.label for s in ok.Plan((0,), nope=True, drope_c0=False).specs()] == [
        okr.ROPE, okr.PI, okr.NTK, okr.YARN, okr.CROP, okr.NOPE_T, okr.DROPE_T]
    assert ok.context(ok.ROPE_CONFIG) == C


@pytest.mark.parametrize("value", ["0", "-1", "two", ""])
def test_reproduce_refuses_a_bad_offset_key_seeds_knob(tmp_path, monkeypatch, capsys, value):
    monkeypatch.chdir(tmp_path)  # reproduce() changes to the repository root: restored after the test
    monkeypatch.setenv("DROPE_RUN_DIR", str(tmp_path / "run"))
    monkeypatch.setenv("DROPE_BUILD_DIR", str(tmp_path / "no-bin"))
    for knob in ("DROPE_REPRO_SCALE", "DROPE_REPRO_STEPS", "DROPE_REPRO_SEEDS", "DROPE_REPRO_TRIALS", "DROPE_FORCE"):
        monkeypatch.delenv(knob, raising=False)
    monkeypatch.setenv("DROPE_REPRO_OK_SEEDS", value)
    assert reproduce.reproduce() == 2
    assert f"reproduce: DROPE_REPRO_OK_SEEDS must be a positive integer, got '{value}'" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


class MissingInitDriver(Driver):
    """drope-train writes only the final checkpoint: the DroPE init (RoPE step 600) is then missing."""

    def tool(self, name, *args, **kw):
        assert name == "drope-train", args
        out = next(a.split("=", 1)[1] for a in args if str(a).startswith("run.out_dir="))
        final = pathlib.Path(out) / "checkpoints" / "step-00000800"
        final.mkdir(parents=True)
        (final / "model.safetensors").write_text("")


def test_a_missing_drope_init_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    d = MissingInitDriver("test", tmp_path, width=3)
    with pytest.raises(ValueError, match=r"rope-s0/checkpoints/step-00000400 is missing \(the RoPE config must keep"):
        ok.run(d, tmp_path / "ok", ok.Plan((0,)))


def test_the_claims_are_redone_from_the_committed_csv(tmp_path):
    """from_csv reads csv_text back with every seed's value: the paired tests give the same verdicts and p-values
    (one disagreeing table and one agreeing), and a row without its values is refused."""
    for override in (None, {(okr.YARN_T, 8): 99.9}):
        doc = build(tmp_path, override=override)
        again = okr.from_csv(okr.csv_text(doc), (400, 800))
        assert [(c["letter"], c["verdict"]) for c in again["claims"]] == \
            [(c["letter"], c["verdict"]) for c in doc["claims"]]
        for a, b in zip(again["claims"], doc["claims"]):
            assert a["p"] == pytest.approx(b["p"], rel=1e-4, abs=1e-12)
    bad = okr.csv_text(doc).replace(" ".join(f"{v:g}" for v in cell(doc, okr.ROPE, C)["accuracy"]["values"]), "")
    with pytest.raises(okr.results.ResultsError, match="line 2"):
        okr.from_csv(bad, (400, 800))
