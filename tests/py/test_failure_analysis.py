"""studies/failure_analysis.py: which seeds count as recovered / on the plateau, the recipe it picks
(and the one-line refusal listing what there is), and the whole run on a fake study of tiny random models with the
real drope-analyze (the figure only where matplotlib is installed)."""
import json

import pytest
import yaml

from conftest import BIN, run_cli
from studies import failure_analysis as fa
from studies.failure_analysis import SeedResult


def offset_key_doc(accuracy):
    return {"schema": "drope.results", "schema_version": 1, "kind": "offset-key", "train_length": 64,
            "results": [{"length": 64, "accuracy": accuracy}, {"length": 128, "accuracy": 1.0}]}


def test_seed_states():
    assert SeedResult("r", 0, 98.0, 100.0).state == "recovered"  # within 2 points of its RoPE model
    assert SeedResult("r", 0, 97.9, 100.0).state == "other"
    assert SeedResult("r", 0, 49.1, 100.0).state == "plateau"
    assert SeedResult("r", 0, 40.0, 100.0).state == "plateau" and SeedResult("r", 0, 60.0, 100.0).state == "plateau"
    assert SeedResult("r", 0, 27.0, 100.0).state == "other"  # below NoPE's plateau
    assert SeedResult("r", 0, 50.0, 51.0).state == "recovered"  # RoPE itself did not learn the task


def test_scan_and_pick(tmp):
    ev = tmp / "eval"
    ev.mkdir()
    for seed, acc in ((0, 99.9), (1, 100.0), (2, 100.0)):
        (ev / f"rope-s{seed}-heldout.json").write_text(json.dumps(offset_key_doc(acc)))
    for recipe, seed, acc in (("a", 0, 27.0), ("a", 1, 99.0), ("b", 0, 99.9), ("b", 1, 49.1), ("b", 2, 52.0),
                              ("c", 0, 99.9), ("c", 3, 50.0)):  # c-s3: no RoPE evaluation, left out
        (ev / f"drope-{recipe}-s{seed}-heldout.json").write_text(json.dumps(offset_key_doc(acc)))
    (ev / "drope-b-s0-test.json").write_text(json.dumps(offset_key_doc(10.0)))  # another split, not read
    found = fa.scan(tmp, "heldout")
    assert sorted((r.recipe, r.seed) for r in found) == [("a", 0), ("a", 1), ("b", 0), ("b", 1), ("b", 2), ("c", 0)]
    rec, plat = fa.pick(found)
    assert (rec.recipe, rec.seed, plat.seed, plat.accuracy) == ("b", 0, 1, 49.1)
    assert fa.pick(found, plateaued=2)[1].seed == 2
    with pytest.raises(ValueError, match=r"no recipe .* \(a\): a: s0 27.0 % \(other\), s1 99.0 % \(recovered\)"):
        fa.pick(found, recipe="a")
    with pytest.raises(ValueError, match="no recipe"):
        fa.pick(found, recovered=5)


def make_study(tmp):
    """A study directory of tiny random models: RoPE s0/s1 checkpoints at step 6, DroPE runs of 2 steps from them
    (drope-model drop), evaluations that make s0 recovered and s1 plateaued."""
    study = tmp / "study"
    (study / "eval").mkdir(parents=True)
    for seed, acc in ((0, 99.0), (1, 50.5)):
        rope = study / "train" / f"rope-s{seed}" / "checkpoints" / "step-00000006"
        run_cli("drope-model", "init", "--preset", "micro", "--seed", seed, "--out", rope)
        run = study / "train" / f"drope-x-s{seed}"
        run_cli("drope-model", "drop", "--model", rope, "--qk-norm", "qk", "--out",
                run / "checkpoints" / "step-00000002")
        (run / "config.yaml").write_text(f"run:\n  init: {rope}\ndrope:\n  qk_norm: qk\ntrain:\n  steps: 2\n")
        (run / "log.jsonl").write_text(json.dumps({"step": 2, "val_loss": 1.4 + seed}) + "\n")
        (rope.parents[1] / "log.jsonl").write_text(json.dumps({"step": 6, "val_loss": 0.01}) + "\n")
        (study / "eval" / f"rope-s{seed}-heldout.json").write_text(json.dumps(offset_key_doc(100.0)))
        (study / "eval" / f"drope-x-s{seed}-heldout.json").write_text(json.dumps(offset_key_doc(acc)))
    return study


def has_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_run_on_tiny_models(tmp, capsys):
    study, out = make_study(tmp), tmp / "fa"
    args = ["--study", str(study), "--out", str(out), "--sequences", "3", "--bin", str(BIN)]
    figure = has_matplotlib()
    rc = fa.main(args)
    err = capsys.readouterr().err
    if not figure:  # the numbers are written before the figure needs matplotlib
        assert rc == 1 and "matplotlib" in err
    else:
        assert rc == 0, err
        assert (out / "failure_analysis.png").read_bytes()[:4] == b"\x89PNG"
        assert "<svg" in (out / "failure_analysis.svg").read_text()
    doc = json.loads((out / "summary.json").read_text())
    assert doc["recipe"] == "x" and doc["sequences"] == 3 and doc["length"] == 64
    keys = [m["key"] for m in doc["models"]]
    assert keys == ["rope-s0-6", "dropped-s0", "drope-s0", "rope-s1-6", "dropped-s1", "drope-s1"]
    assert [m["accuracy"] for m in doc["models"]] == [None, None, 99.0, None, None, 50.5]
    assert [m["val_loss"] for m in doc["models"]] == [0.01, None, 1.4, 0.01, None, 2.4]
    # The dropped checkpoint is the DroPE run's starting point: RoPE removed, QK-norm added.
    dropped = yaml.safe_load((out / "models" / "dropped-s0" / "drope.yaml").read_text())
    assert (dropped["positional"]["type"], dropped["qk_norm"]) == ("nope", "qk")
    for m in doc["models"]:
        scores = json.loads((out / m["key"] / "head_scores.json").read_text())
        best = max(scores["heads"], key=lambda h: h["answer_to_query"])
        assert m["previous_head"] == best
        layer, head = m["previous_head"]["layer"], m["previous_head"]["head"]
        if m["key"] in ("rope-s0-6", "drope-s0", "drope-s1"):  # maps: the recovered seed's RoPE, both DroPE
            att = json.loads((out / "maps" / m["key"] / f"attention_L{layer}_H{head}.json").read_text())
            assert att["tokens"] == json.loads((out / "rope-s0-6" / "sequences.json").read_text())[0]
    assert "| DroPE s1: plateau, 50.5 % | 50.5 | 2.400 |" in (out / "summary.md").read_text()


def test_bad_options(tmp, capsys):
    with pytest.raises(SystemExit):
        fa.parse(["--study", str(tmp), "--bin", str(BIN)])
    assert "no eval/ directory" in capsys.readouterr().err
    (tmp / "eval").mkdir()
    with pytest.raises(SystemExit):
        fa.parse(["--study", str(tmp), "--sequences", "0", "--bin", str(BIN)])
    assert "--sequences" in capsys.readouterr().err
    assert fa.main(["--study", str(tmp), "--out", str(tmp / "o"), "--bin", str(BIN)]) == 1
    assert "no evaluated DroPE seeds" in capsys.readouterr().err


def test_every_seed_on_tiny_models(tmp, capsys):
    study, out = make_study(tmp), tmp / "fa-all"
    (study / "eval" / "drope-x-s0-heldout.json").write_text(json.dumps(offset_key_doc(97.0)))  # a failure, other
    args = ["--study", str(study), "--out", str(out), "--sequences", "3", "--bin", str(BIN), "--all"]
    figure = has_matplotlib()
    rc = fa.main(args)
    err = capsys.readouterr().err
    assert rc == (0 if figure else 1), err
    if figure:
        assert (out / "failure_analysis_all.png").read_bytes()[:4] == b"\x89PNG"
    doc = json.loads((out / "summary_all.json").read_text())
    assert [(m["key"], m["group"], m["accuracy"]) for m in doc["models"]] == [
        ("rope-s0-6", fa.GROUPS[0], None), ("drope-x-s0", fa.GROUPS[3], 97.0),
        ("rope-s1-6", fa.GROUPS[0], None), ("drope-x-s1", fa.GROUPS[2], 50.5)]
    assert [doc["groups"][g]["n"] for g in fa.GROUPS] == [2, 0, 1, 1] and doc["groups"][fa.GROUPS[1]][
        "answer_to_query"] is None
    scores = json.loads((out / "drope-x-s1" / "head_scores.json").read_text())
    assert doc["models"][3]["answer_to_query"] == max(h["answer_to_query"] for h in scores["heads"])
    rope = doc["groups"][fa.GROUPS[0]]["needle_selectivity"]
    assert rope["min"] <= rope["median"] <= rope["max"]
    assert "| DroPE failed: plateau | 1 |" in (out / "summary_all.md").read_text()
    stamp = (out / "drope-x-s1" / "head_scores.json").stat().st_mtime_ns
    assert fa.main(args) == rc  # resumed: the head scores are reused
    assert (out / "drope-x-s1" / "head_scores.json").stat().st_mtime_ns == stamp
    with pytest.raises(SystemExit):
        fa.parse([*args, "--recipe", "x"])
    err = capsys.readouterr().err
    assert "--all reads every seed" in err and len(err.strip().splitlines()) == 1
