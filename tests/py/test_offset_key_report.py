"""Offset-key retrieval over seeds (scripts/drope_scripts/offset_key_report.py and offset_key.py): aggregation and
95 % t intervals against scipy and hand values, the claim verdicts (a)–(f) on constructed numbers (each agreeing and
disagreeing), the merged per-(method, seed) results file, and the reproduction's knob."""
import csv
import io
import json
import math
import pathlib

import pytest
from scipy import stats as sps

from drope_scripts import offset_key as ok
from drope_scripts import offset_key_report as okr
from drope_scripts import results
from drope_scripts.driver import ROOT, Driver
from studies import quickstart, reproduce

C = 128
T975_2 = 0.95 * math.sqrt(2 / (1 - 0.95 ** 2))  # t(0.975, 2 dof) in closed form (a·√(2/(1−a²)), a = 0.95)


def result_doc(label, rows, seed=0, c=C, **method):
    """An offset-key results file as drope-eval writes it; rows: {length: (accuracy, far accuracy or None)}."""
    rs = [{"length": L, "accuracy": a, "far_accuracy": f, "queries": 1000, "far_queries": 0 if f is None else 500,
           "correct": round(10 * a), "far_correct": 0 if f is None else round(5 * f)} for L, (a, f) in rows.items()]
    return {"schema": "drope.results", "schema_version": 1, "kind": "offset-key", "seed": seed, "far_threshold": c,
            "train_length": c, "index_split": "test", "method": {"label": label, "train_length": c, **method},
            "results": rs, "summary": okr.summary_of(rs)}


def write(path, doc):
    path.write_text(json.dumps(doc))
    return path


# Means of a pilot-like table: accuracy at C, far accuracy at 2C, 4C, 8C (None: not evaluated at C).
PILOT = {okr.ROPE: (98, 89, 49, 16), okr.PI: (None, 70, 54, 44), okr.NTK: (None, 97, 88, 62),
         okr.YARN: (None, 91, 75, 70), okr.NOPE_T: (88, 84, 71, 58), okr.DROPE_T: (96, 95, 90, 89),
         okr.DROPE_0: (96, 79, 67, 50)}
SPREAD3 = (-1.0, 0.0, 1.0)  # three seeds around each mean: std 1, half-width t(0.975, 2)/√3 = 2.484


def build(tmp_path, table=PILOT, spread=SPREAD3, override=None, drop=()):
    """Per-seed result files of `table` (means + spread per seed; `override` {(label, mult): mean}), aggregated."""
    means = {label: list(v) for label, v in table.items() if label not in drop}
    for (label, mult), v in (override or {}).items():
        means[label][{1: 0, 2: 1, 4: 2, 8: 3}[mult]] = v
    files = {}
    for label, (at_c, *far) in means.items():
        for seed, d in enumerate(spread):
            rows = {} if at_c is None else {C: (at_c + d, None)}
            rows.update({m * C: (95.0, None if f is None else f + d) for m, f in zip((2, 4, 8), far)})
            slug = label.lower().replace("+", "-").replace(" ", "-").replace("=", "")
            files.setdefault(label, []).append(write(tmp_path / f"{slug}-s{seed}.json",
                                                     result_doc(label, rows, seed)))
    return okr.aggregate(files, C, (1, 2, 4, 8), (200, 800))


def verdicts(doc):
    return {cl["letter"]: cl["verdict"] for cl in doc["claims"]}


def cell(doc, label, length):
    return next(c for m in doc["methods"] if m["label"] == label for c in m["cells"] if c["length"] == length)


# ---- aggregation -------------------------------------------------------------------------------------------

def test_mean_and_interval_match_scipy_and_hand_values(tmp_path):
    values = [45.0, 50.0, 58.0]
    files = [write(tmp_path / f"r{s}.json", result_doc("RoPE", {C: (99.0 + s, None), 4 * C: (60.0, v)}, s))
             for s, v in enumerate(values)]
    doc = okr.aggregate({"RoPE": files}, C, (1, 4), (200, 800))
    far = cell(doc, "RoPE", 4 * C)["far_accuracy"]
    std = math.sqrt((36 + 1 + 49) / 2)  # deviations -6, -1, +7 from 51
    half = T975_2 * std / math.sqrt(3)
    assert far["n"] == 3 and far["mean"] == pytest.approx(51.0) and far["std"] == pytest.approx(std)
    assert far["half_width"] == pytest.approx(half, abs=1e-9) and half == pytest.approx(16.28958, abs=1e-5)
    lo, hi = sps.t.interval(0.95, 2, loc=51.0, scale=sps.sem(values))
    assert (far["ci_low"], far["ci_high"]) == pytest.approx((lo, hi), abs=1e-9)
    assert (far["min"], far["max"], far["values"]) == (45.0, 58.0, values)
    at_c = cell(doc, "RoPE", C)
    assert at_c["accuracy"]["mean"] == pytest.approx(100.0) and at_c["far_accuracy"] is None
    assert at_c["queries"] == 3000 and cell(doc, "RoPE", 4 * C)["far_queries"] == 1500
    assert doc["kind"] == okr.AGGREGATE_KIND and doc["lengths"] == [C, 4 * C] and doc["confidence"] == 0.95


def test_one_seed_has_no_interval_and_unevaluated_lengths_are_null(tmp_path):
    f = write(tmp_path / "pi.json", result_doc("RoPE+PI", {2 * C: (90.0, 70.0)}))
    doc = okr.aggregate({"RoPE+PI": [f]}, C, (1, 2), (200, 800))
    assert cell(doc, "RoPE+PI", C) == {"length": C, "accuracy": None, "far_accuracy": None, "queries": 0,
                                       "far_queries": 0}
    far = cell(doc, "RoPE+PI", 2 * C)["far_accuracy"]
    assert (far["n"], far["mean"], far["std"]) == (1, 70.0, 0.0)
    assert far["half_width"] is None and far["ci_low"] is None and far["ci_high"] is None
    json.dumps(doc, allow_nan=False)  # no NaN in the document


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


def test_table_csv_and_claim_lines(tmp_path):
    doc = build(tmp_path)
    text = okr.markdown(doc, "runs/x/offset-key")
    lines = text.splitlines()
    assert "| method | C = 128 (all) | 2C = 256 (far) | 4C = 512 (far) | 8C = 1024 (far) |" in lines
    assert "| RoPE | 98.0 ± 2.5 | 89.0 ± 2.5 | 49.0 ± 2.5 | 16.0 ± 2.5 |" in lines
    assert "| RoPE+PI | – | 70.0 ± 2.5 | 54.0 ± 2.5 | 44.0 ± 2.5 |" in lines
    assert "3 seeds: mean ± half-width of the 95 % t interval of the mean" in text
    assert "Plot: `runs/x/offset-key/far.png`" in text
    claim_lines = [l for l in lines if l.startswith("claim (")]
    assert [l[7] for l in claim_lines] == list("abcdef")
    assert all(l.endswith(": agrees") for l in claim_lines), claim_lines
    assert ("claim (e) DroPE recovers RoPE's in-context accuracy with 25 % (200 of 800 steps recalibrating) of the "
            "budget: agrees") in claim_lines
    assert "RoPE+NTK 88.0 ± 2.5 (tie within the intervals)" in text  # DroPE 90 vs NTK 88 at 4C
    rows = list(csv.DictReader(io.StringIO(okr.csv_text(doc))))
    r = next(r for r in rows if (r["method"], r["length"], r["metric"]) == ("DroPE c=0", "1024", "far_accuracy"))
    assert float(r["mean"]) == 50.0 and float(r["half_width"]) == pytest.approx(T975_2 / math.sqrt(3))
    assert not any(r["method"] == "RoPE+PI" and r["length"] == "128" for r in rows)


# ---- claims ------------------------------------------------------------------------------------------------

def test_pilot_numbers_agree_with_every_claim(tmp_path):
    assert verdicts(build(tmp_path)) == dict.fromkeys("abcdef", "agrees")


@pytest.mark.parametrize("letter, override", [
    ("a", {(okr.ROPE, 8): 97}),  # no collapse at 8C
    ("a", {(okr.ROPE, 8): 93.5}),  # below 98 but within both intervals (margin 2 × 2.484)
    ("b", {(okr.PI, 2): 89}),  # PI equal to RoPE at 2C
    ("c", {(okr.NTK, 4): 40}),  # NTK below RoPE at 4C
    ("c", {(okr.YARN, 4): 99, (okr.DROPE_T, 4): 99.5}),  # YaRN at 4C above RoPE's accuracy at C: not "partly"
    ("d", {(okr.YARN, 8): 89.5}),  # YaRN above DroPE at 8C (within the intervals, still not >=)
    ("e", {(okr.DROPE_T, 1): 95}),  # 95 < 98 - 2.484
    ("f", {(okr.DROPE_0, 8): 89}),  # the temperature adds nothing at 8C
])
def test_each_claim_can_disagree(tmp_path, letter, override):
    v = verdicts(build(tmp_path, override=override))
    assert v[letter] == "disagrees"
    assert all(x == "agrees" for k, x in v.items() if k != letter), v


def test_borderline_cases_follow_the_stated_margins(tmp_path):
    assert verdicts(build(tmp_path, override={(okr.ROPE, 8): 92.9}))["a"] == "agrees"  # 98 - 2·2.484 = 93.03
    assert verdicts(build(tmp_path, override={(okr.DROPE_T, 1): 95.6}))["e"] == "agrees"  # 98 - 2.484 = 95.52
    assert verdicts(build(tmp_path, override={(okr.YARN, 8): 89}))["d"] == "agrees"  # a tie counts as >=


def test_one_seed_uses_the_fixed_margin(tmp_path):
    one = (0.0,)
    assert verdicts(build(tmp_path, spread=one)) == dict.fromkeys("abcdef", "agrees")
    assert verdicts(build(tmp_path, spread=one, override={(okr.DROPE_T, 1): 96.5}))["e"] == "agrees"  # within 2
    assert verdicts(build(tmp_path, spread=one, override={(okr.DROPE_T, 1): 95.5}))["e"] == "disagrees"
    assert verdicts(build(tmp_path, spread=one, override={(okr.ROPE, 4): 95.5}))["a"] == "agrees"  # 98 - 2
    assert verdicts(build(tmp_path, spread=one, override={(okr.ROPE, 4): 96.5}))["a"] == "disagrees"
    text = okr.markdown(build(tmp_path, spread=one), "x")
    assert "1 seed: no confidence interval" in text and "| RoPE | 98.0 | 89.0 | 49.0 | 16.0 |" in text


def test_missing_methods_make_a_claim_inconclusive(tmp_path):
    v = verdicts(build(tmp_path, drop=(okr.DROPE_0, okr.NOPE_T)))  # the quickstart without c = 0
    assert v == {**dict.fromkeys("abcde", "agrees"), "f": "inconclusive"}
    doc = build(tmp_path, override={(okr.ROPE, 4): None})
    a = next(cl for cl in doc["claims"] if cl["letter"] == "a")
    assert a["verdict"] == "inconclusive" and a["evidence"] == "RoPE far accuracy at 4C was not measured"


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
    assert [s.label for s in quickstart.OFFSET_KEY.specs()] == [okr.ROPE, okr.PI, okr.NTK, okr.YARN, okr.DROPE_T,
                                                                okr.DROPE_0]
    assert quickstart.OFFSET_KEY.seeds == (0,) and quickstart.OFFSET_KEY.queries >= 1000
    assert [s.label for s in ok.Plan((0,), nope=True, drope_c0=False).specs()] == [
        okr.ROPE, okr.PI, okr.NTK, okr.YARN, okr.NOPE_T, okr.DROPE_T]
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
