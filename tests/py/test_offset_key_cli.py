"""drope-eval offset-key end to end on a tiny random model: the results schema, the far/near split, chance-level
accuracy, determinism, method variants and bad flags."""
import json

import pytest

from conftest import expect_error, run_cli


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    root = tmp_path_factory.mktemp("offsetkey")
    run_cli("drope-model", "init", "--preset", "micro", "--seed", 3, "--out", root / "m")  # vocab 256, C = 64
    return root


def run_ok(model, out, *extra):
    run_cli("drope-eval", "offset-key", "--model", model / "m", "--out", out, "--threads", 1, *extra)
    return json.loads(out.with_suffix(".json").read_text())


def test_results_schema_split_and_chance(model, tmp):
    doc = run_ok(model, tmp / "ok", "--lengths", "64,128", "--queries", 40, "--batch-size", 4)
    assert doc["schema"] == "drope.results" and doc["kind"] == "offset-key"
    assert doc["far_threshold"] == 64 and doc["train_length"] == 64
    assert doc["method"]["label"] == "m"
    r64, r128 = doc["results"]
    assert (r64["length"], r128["length"]) == (64, 128)
    for r in (r64, r128):
        assert r["queries"] == 40
        assert 0 <= r["correct"] <= 40 and r["accuracy"] == pytest.approx(100 * r["correct"] / 40)
        # A random model: near chance (1/16 within the right colour, 1/256 over the vocabulary); loosely bounded.
        assert r["accuracy"] <= 40
    # At L = C no needle is farther than C from its query; at 2C some are.
    assert r64["far_queries"] == 0 and r64["far_accuracy"] is None
    assert 0 < r128["far_queries"] <= 40 and r128["far_accuracy"] is not None
    assert set(doc["summary"]) == {"acc@64", "acc@128", "far@128"}
    for ext in (".csv", ".md", ".png", ".svg"):
        assert (tmp / ("ok" + ext)).stat().st_size > 0


def test_deterministic_and_far_threshold(model, tmp):
    a = run_ok(model, tmp / "a", "--lengths", 80, "--queries", 20)
    b = run_ok(model, tmp / "b", "--lengths", 80, "--queries", 20, "--batch-size", 3)  # batching changes nothing
    assert a["results"] == b["results"]
    c = run_ok(model, tmp / "c", "--lengths", 80, "--queries", 20, "--far-threshold", 1)
    assert c["results"][0]["far_queries"] == 20 and c["far_threshold"] == 1
    # queries round up to whole sequences of 4
    assert run_ok(model, tmp / "d", "--lengths", 80, "--queries", 5)["results"][0]["queries"] == 8


def test_split_heldout_and_test(model, tmp):
    """--split picks the index split: held-out and test sequences differ (needle distances, so far-query counts
    and answers), the default is test, and the file records the split."""
    args = ("--lengths", "64,128", "--queries", 200, "--seed", 5)
    default = run_ok(model, tmp / "default", *args)
    test = run_ok(model, tmp / "test", *args, "--split", "test")
    heldout = run_ok(model, tmp / "heldout", *args, "--split", "heldout")
    assert default["index_split"] == test["index_split"] == "test" and heldout["index_split"] == "heldout"
    assert default["results"] == test["results"]
    assert heldout["seed"] == test["seed"] == 5
    key = ("far_queries", "correct", "far_correct")
    assert [tuple(r[k] for k in key) for r in heldout["results"]] != [tuple(r[k] for k in key) for r in test["results"]]
    # the needle positions differ: the share of far needles at 2C is not the same count
    assert heldout["results"][1]["far_queries"] != test["results"][1]["far_queries"]
    # deterministic per split
    assert run_ok(model, tmp / "heldout2", *args, "--split", "heldout")["results"] == heldout["results"]


def test_multipliers_and_variant(model, tmp):
    doc = run_ok(model, tmp / "y", "--multipliers", "1,2", "--queries", 8, "--rope-scaling", "yarn", "--factor", 2)
    assert [r["length"] for r in doc["results"]] == [64, 128]
    assert "yarn" in doc["method"]["label"]


def test_crop(model, tmp):
    """--crop: at L ≤ C the plain evaluation, count for count; beyond C the same queries (and far split) read through
    BOS + the last C − 1 tokens, so far accuracy stays near chance (at most 1/16 in expectation, for any model).
    The window itself is checked against an input cropped by hand in tests/test_eval.cpp (OffsetKeyCrop)."""
    args = ("--lengths", "40,64,128,512", "--queries", 400, "--batch-size", 25)
    plain = run_ok(model, tmp / "plain", *args)
    crop = run_ok(model, tmp / "crop", *args, "--crop")
    assert crop["crop"] is True and plain["crop"] is False
    assert crop["method"]["label"] == "m+crop"
    assert run_ok(model, tmp / "named", "--lengths", 64, "--queries", 4, "--crop", "--label", "RoPE crop")[
        "method"]["label"] == "RoPE crop"
    assert crop["results"][:2] == plain["results"][:2]  # L = 40, 64 ≤ C = 64
    for p, c in zip(plain["results"][2:], crop["results"][2:]):
        assert (c["length"], c["queries"], c["far_queries"]) == (p["length"], p["queries"], p["far_queries"])
        assert c["far_queries"] > 100
        assert c["far_accuracy"] <= 100 / 16 + 5
    assert "reading BOS + the last 63 tokens" in (tmp / "crop.md").read_text()


def test_crop_refuses_method_flags(model, tmp):
    base = ["drope-eval", "offset-key", "--model", model / "m", "--out", tmp / "x", "--lengths", 64, "--crop"]
    for extra in (("--rope-scaling", "yarn", "--factor", 2), ("--factor", 2), ("--temperature", 0),
                  ("--temperature", "auto")):
        r = run_cli(*base, *extra, check=False)
        expect_error(r, "--crop is plain RoPE", "no --rope-scaling, --factor or --temperature")
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp / "x.json").exists()


def test_bad_flags(model, tmp):
    base = ["drope-eval", "offset-key", "--model", model / "m", "--out", tmp / "x"]
    expect_error(run_cli(*base, "--lengths", 10, check=False), "--lengths", "at least 17 tokens", "got 10")
    expect_error(run_cli(*base, "--multipliers", 0.1, check=False), "--multipliers", "at least 17 tokens", "got 6")
    expect_error(run_cli(*base, "--lengths", 64, "--queries", 0, check=False), "--queries", "[1, 1048576]", "got 0")
    expect_error(run_cli(*base, "--lengths", 64, "--batch-size", 0, check=False), "--batch-size", "[1, 1048576]",
                 "got 0")
    expect_error(run_cli(*base, "--lengths", 64, "--multipliers", 2, check=False), "either --lengths or --multipliers")
    expect_error(run_cli(*base, check=False), "give --lengths or --multipliers")
    expect_error(run_cli("drope-eval", "offset-key", "--lengths", 64, check=False), "--model")
    r = run_cli(*base, "--lengths", 64, "--split", "train", check=False)
    expect_error(r, "--split", "heldout or test", "'train'")
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    cfg = tmp / "small.yaml"
    cfg.write_text("model:\n  preset: micro\n  vocab_size: 128\n")
    run_cli("drope-model", "init", "--config", cfg, "--out", tmp / "small")
    expect_error(run_cli("drope-eval", "offset-key", "--model", tmp / "small", "--lengths", 64, check=False),
                 "at least 196 token ids", "has 128")
    assert not (tmp / "x.json").exists()


def test_fit_temperature_on_the_task(model, tmp):
    """fit-temperature --task offset-key: the answers' held-out perplexity per β, c saved for --temperature auto;
    β = 1 is in the grid, so the best perplexity is never above the β = 1 one."""
    save = tmp / "temperature.json"
    run_cli("drope-eval", "fit-temperature", "--model", model / "m", "--task", "offset-key", "--multipliers", 2,
            "--queries", 16, "--batch-size", 2, "--save", save, "--out", tmp / "fit", "--threads", 1)
    doc = json.loads(save.read_text())
    assert doc["kind"] == "temperature" and doc["data"] == "offset-key"
    (fit,) = doc["fits"]
    assert fit["length"] == 128 and 1.0 <= fit["best_beta"] <= 2.5
    assert fit["best_ppl"] <= fit["base_ppl"]
    assert 1.0 in fit["grid_beta"]
    # perplexity of answers: a random model sits near the vocabulary size, far from 1
    assert 20 < fit["base_ppl"] < 2000
    assert doc["c"] == pytest.approx((fit["best_beta"] - 1) / __import__("math").log(2), abs=1e-9)
    base = ["drope-eval", "fit-temperature", "--model", model / "m", "--save", tmp / "t2.json"]
    expect_error(run_cli(*base, check=False), "exactly one of --data or --task")
    expect_error(run_cli(*base, "--task", "needles", check=False), "--task", "needles", "offset-key")
    expect_error(run_cli(*base, "--task", "offset-key", "--data", model, check=False),
                 "exactly one of --data or --task")
    expect_error(run_cli(*base, "--task", "offset-key", "--queries", 0, check=False), "--queries")
    assert not (tmp / "t2.json").exists()


def test_compare_plot_seeds(tmp):
    """compare --plot acc: files sharing a label are seeds of one method (mean line, min-max band)."""
    def results(name, label, accs):
        doc = {"schema": "drope.results", "schema_version": 1, "kind": "offset-key",
               "method": {"label": label, "train_length": 64},
               "summary": {f"acc@{L}": a for L, a in accs.items()}}
        path = tmp / f"{name}.json"
        path.write_text(json.dumps(doc))
        return path

    files = [results("a1", "A", {64: 90, 128: 10}), results("a2", "A", {64: 70, 128: 30}),
             results("b", "B", {64: 50, 128: 50})]
    run_cli("drope-eval", "compare", *files, "--plot", "acc", "--out", tmp / "cmp")
    svg = (tmp / "cmp.svg").read_text()
    assert svg.startswith("<?xml") and (tmp / "cmp.png").stat().st_size > 0
    assert [m["label"] for m in json.loads((tmp / "cmp.json").read_text())["methods"]] == ["A", "A", "B"]
    # the same means without seeds (no band) draw differently; cairo writes text as glyphs, so compare drawings
    mean = results("amean", "A", {64: 80, 128: 20})
    run_cli("drope-eval", "compare", mean, files[2], "--plot", "acc", "--out", tmp / "one")
    assert (tmp / "one.svg").read_text() != svg
    expect_error(run_cli("drope-eval", "compare", *files, "--plot", "nothing", "--out", tmp / "bad", check=False),
                 "--plot nothing", "no file has a summary entry 'nothing@L'")
    assert not (tmp / "bad.json").exists() and not (tmp / "bad.png").exists()


def test_crop_refuses_a_model_without_positions(model, tmp):
    """The cropped-context baseline keeps a positional model inside its training length; a model that is NoPE in
    every layer has none, so --crop is refused naming it (the plain evaluation still runs)."""
    run_cli("drope-model", "drop", "--model", model / "m", "--out", tmp / "nope")
    r = run_cli("drope-eval", "offset-key", "--model", tmp / "nope", "--out", tmp / "x", "--lengths", 64, "--crop",
                check=False)
    expect_error(r, "--crop", "has no positional encoding (NoPE in every layer)")
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp / "x.json").exists(), r.stderr
    run_cli("drope-eval", "offset-key", "--model", tmp / "nope", "--out", tmp / "plain", "--lengths", 64,
            "--queries", 4, "--threads", 1)
