"""drope-analyze at the CLI edge: bad inputs end with one clear line and no crash; bias-grad, constant-seq,
attention, head-scores and rope-scaling --out write their files."""
import csv
import json

import pytest

from conftest import expect_error, run_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def analyze(*args):
    return run_cli("drope-analyze", *args, check=False)


@pytest.fixture
def model_dir(tmp):
    run_cli("drope-model", "init", "--preset", "micro", "--out", tmp / "m")
    return tmp / "m"


def test_unknown_model_dir(tmp):
    out = tmp / "out"
    expect_error(analyze("bias-grad", "--model", tmp / "nowhere", "--out", out), "nowhere", "not found")
    expect_error(analyze("constant-seq", "--model", tmp / "nowhere"), "nowhere", "not found")
    assert not out.exists()


def test_truncated_checkpoint(tmp, model_dir):
    data = (model_dir / "model.safetensors").read_bytes()
    (model_dir / "model.safetensors").write_bytes(data[: len(data) // 3])
    out = tmp / "out"
    expect_error(analyze("bias-grad", "--model", model_dir, "--seqs", 1, "--seeds", 1, "--seq-len", 8, "--out", out),
                 "model.safetensors")
    assert not out.exists()


def test_layer_and_head_out_of_range(tmp, model_dir):
    text = tmp / "prompt.txt"
    text.write_text("The grass is green. The sky is blue.")
    out = tmp / "att"
    expect_error(analyze("attention", "--model", model_dir, "--text", text, "--layer", 5, "--head", 0, "--out", out),
                 "layer 5", "2 layers", "0..1")
    expect_error(analyze("attention", "--model", model_dir, "--text", text, "--layer", 0, "--head", 9, "--out", out),
                 "head 9", "0..3")
    assert not out.exists()


def test_other_bad_inputs(tmp, model_dir):
    out = tmp / "out"
    expect_error(analyze("bias-grad", "--seqs", 0, "--out", out), "--seqs")
    expect_error(analyze("bias-grad", "--model", model_dir, "--text", tmp / "missing.txt", "--out", out),
                 "missing.txt", "not found")
    short = tmp / "short.txt"
    short.write_text("abc")
    expect_error(analyze("bias-grad", "--model", model_dir, "--text", short, "--seq-len", 16, "--out", out),
                 "short.txt", "--seq-len 16")
    expect_error(analyze("constant-seq", "--model", model_dir, "--token", 999), "token 999", "[0, 256)")
    expect_error(analyze("attention", "--model", model_dir, "--layer", 0, "--head", 0, "--out", out), "--text")
    assert not out.exists()


def test_bias_grad_happy_path(tmp):
    out = tmp / "bg"
    r = run_cli("drope-analyze", "bias-grad", "--seqs", 2, "--seeds", 1, "--seq-len", 32, "--out", out)
    assert "tiny-rope" in r.stdout and "tiny-nope" in r.stdout
    for name in ("bias_grad.json", "bias_grad.csv", "bias_grad.svg"):
        assert (out / name).stat().st_size > 100, name
    assert (out / "bias_grad.png").read_bytes()[:8] == PNG_MAGIC
    assert (out / "bias_grad.svg").read_text().startswith("<?xml")
    res = json.loads((out / "bias_grad.json").read_text())
    assert (res["schema"], res["schema_version"], res["kind"]) == ("drope.results", 1, "bias-grad")
    names = [m["name"] for m in res["models"]]
    assert names == ["tiny-rope", "tiny-nope"]
    for m in res["models"]:
        assert m["seq_len"] == 32 and m["num_seqs"] == 2 and m["num_seeds"] == 1
        for kind in ("diagonal", "previous-token"):
            layers = m["weights"][kind]
            assert len(layers) == 4
            assert all(l["grad_all"]["mean"] > 0 for l in layers)
    rows = list(csv.DictReader((out / "bias_grad.csv").open()))
    assert len(rows) == 2 * 2 * 4
    assert {"model", "weights", "layer", "grad_all_mean", "grad_wq_std"} <= set(rows[0])


def test_constant_seq_and_attention(tmp, model_dir):
    r = run_cli("drope-analyze", "constant-seq", "--preset", "micro", "--positional", "nope", "--out", tmp / "cs")
    res = json.loads((tmp / "cs" / "constant_seq.json").read_text())
    assert (res["schema"], res["kind"]) == ("drope.results", "constant-seq")
    assert res["max_attention_deviation"] < 1e-12 and res["bias_grad_wq"] < 1e-12
    assert "Proposition 3.1" in r.stdout
    run_cli("drope-analyze", "constant-seq", "--model", model_dir, "--out", tmp / "cs2")
    rope = json.loads((tmp / "cs2" / "constant_seq.json").read_text())
    assert rope["max_attention_deviation"] > 1e-8 and rope["bias_grad_wq"] > 1e-8
    text = tmp / "prompt.txt"
    text.write_text("One of the special magic numbers is: 1234567.")
    run_cli("drope-analyze", "attention", "--model", model_dir, "--text", text, "--layer", 1, "--head", 2,
            "--out", tmp / "att")
    assert (tmp / "att" / "attention_L1_H2.png").read_bytes()[:8] == PNG_MAGIC
    att = json.loads((tmp / "att" / "attention_L1_H2.json").read_text())
    assert att["tokens"] == list(text.read_bytes()) and len(att["map"]) == len(att["tokens"])
    assert all(sum(row) == pytest.approx(1.0, rel=1e-5) for row in att["map"])
    assert "<svg" in (tmp / "att" / "attention_L1_H2.svg").read_text()


def test_rope_scaling_out_keeps_json_stdout(tmp):
    r = run_cli("drope-analyze", "rope-scaling", "--type", "yarn", "--head-dim", 64, "--train-length", 2048,
                "--out", tmp / "rs")
    res = json.loads(r.stdout)
    assert [e["factor"] for e in res] == [2.0, 3.0, 4.0] and res[0]["type"] == "yarn"
    assert (tmp / "rs" / "rope_scaling.png").read_bytes()[:8] == PNG_MAGIC
    rows = list(csv.DictReader((tmp / "rs" / "rope_scaling.csv").open()))
    assert len(rows) == 3 * 3 * 32
    yarn2 = [float(x["gamma"]) for x in rows if x["type"] == "yarn" and float(x["factor"]) == 2.0]
    assert yarn2[0] == pytest.approx(1.0) and yarn2[-1] == pytest.approx(0.5)


def test_needle_attention(tmp, model_dir):
    out = tmp / "na"
    r = run_cli("drope-analyze", "needle-attention", "--model", model_dir, "--method", "none", "--method", "yarn:2",
                "--method", "temperature:0.4", "--length", "300", "--depth", "25", "--window", "8", "--out", out)
    doc = json.loads((out / "needle_attention.json").read_text())
    assert (doc["schema"], doc["schema_version"], doc["kind"]) == ("drope.results", 1, "needle-attention")
    runs = doc["runs"]
    assert [x["label"].split(" ")[-1] for x in runs][1:] == ["yarn:2", "temperature:0.4"]
    for x in runs:
        assert x["prompt_tokens"] == 300 and 0 <= x["mean_needle_mass"] <= 1
        assert len(x["key_offset"]) == len(x["mean"]) == (x["needle_end"] - x["needle_begin"]) + 16
    assert runs[0]["needle_mass"] != runs[1]["needle_mass"]  # YaRN changes the attention
    for ext in ("png", "svg", "csv"):
        assert (out / f"needle_attention.{ext}").is_file()
    for extra, needle in ((["--method", "yarn"], "expected yarn:S"), (["--method", "rope:2"], "unknown method"),
                          (["--method", "yarn:0.5"], ">= 1"), (["--method", "drope+x"], "QK-norm mode"),
                          (["--depth", "120"], "--depth"), (["--length", "10"], "too short"),
                          (["--haystack", tmp / "none.txt"], "none.txt")):
        r = run_cli("drope-analyze", "needle-attention", "--model", model_dir, *extra, "--out", tmp / "bad",
                    check=False)
        expect_error(r, needle)
    assert not (tmp / "bad").exists()


def test_attention_json_and_head_scores_on_a_constant_sequence(tmp):
    """Proposition 3.1 as the oracle: without positions, a sequence of one repeated token gets uniform causal
    attention, α_ij = 1/(i+1) for j <= i, in every head; so the previous-token and first-token scores are both
    mean over i = 1..T-1 of 1/(i+1)."""
    T = 24
    tokens = tmp / "same.json"
    tokens.write_text(json.dumps([[7] * T] * 3))
    nope = ("--preset", "micro", "--positional", "nope", "--seed", 4)
    run_cli("drope-analyze", "attention", *nope, "--tokens", tokens, "--layer", 1, "--head", 3, "--out", tmp / "att")
    doc = json.loads((tmp / "att" / "attention_L1_H3.json").read_text())
    assert (doc["schema"], doc["kind"], doc["layer"], doc["head"]) == ("drope.results", "attention-map", 1, 3)
    assert doc["tokens"] == [7] * T and len(doc["map"]) == T
    for i, row in enumerate(doc["map"]):
        assert row == pytest.approx([1 / (i + 1) if j <= i else 0.0 for j in range(T)], rel=1e-5, abs=1e-12)
    uniform = sum(1 / (i + 1) for i in range(1, T)) / (T - 1)
    assert doc["previous_token"] == pytest.approx(uniform, rel=1e-5)
    r = run_cli("drope-analyze", "head-scores", *nope, "--tokens", tokens, "--batch-size", 2, "--out", tmp / "hs")
    res = json.loads((tmp / "hs" / "head_scores.json").read_text())
    assert (res["kind"], res["sequences"], res["length"]) == ("head-scores", 3, T) and "task" not in res
    assert [(h["layer"], h["head"]) for h in res["heads"]] == [(l, h) for l in range(2) for h in range(4)]
    for h in res["heads"]:
        assert h["previous_token"] == pytest.approx(uniform, rel=1e-5)
        assert h["first_token"] == pytest.approx(uniform, rel=1e-5)
        assert "answer_to_query" not in h
    assert "previous_token" in r.stdout and not (tmp / "hs" / "sequences.json").exists()
    rows = list(csv.DictReader((tmp / "hs" / "head_scores.csv").open()))
    assert len(rows) == 8 and float(rows[5]["previous_token"]) == pytest.approx(uniform, rel=1e-5)


def scores_from_map(m, layout):
    """The head-scores numbers recomputed in float64 from one head's attention map (one sequence)."""
    T = len(m)
    out = {"previous_token": sum(m[i][i - 1] for i in range(1, T)) / (T - 1),
           "first_token": sum(m[i][0] for i in range(1, T)) / (T - 1)}
    keys = ("answer_to_query", "answer_to_earlier_queries", "answer_to_needle", "answer_to_other_needles",
            "query_to_needle", "query_to_other_needles")
    acc = dict.fromkeys(keys, 0.0)
    answers, needles = layout["answer_positions"], layout["needle_positions"]
    for k, (a, n) in enumerate(zip(answers, needles)):
        others = [x for x in needles if x != n]
        acc["answer_to_query"] += m[a][a - 1]
        if k:
            acc["answer_to_earlier_queries"] += sum(m[a][e - 1] for e in answers[:k]) / k / (len(answers) - 1)
        acc["answer_to_needle"] += m[a][n]
        acc["answer_to_other_needles"] += sum(m[a][x] for x in others) / len(others)
        acc["query_to_needle"] += m[a - 1][n]
        acc["query_to_other_needles"] += sum(m[a - 1][x] for x in others) / len(others)
    out.update({k: v if k == "answer_to_earlier_queries" else v / len(answers) for k, v in acc.items()})
    return out


def test_head_scores_offset_key_against_attention_maps(tmp, model_dir):
    """--task offset-key: the task's sequences (SEP answers, Q_c before it, the needle of colour c in the body),
    and every head's scores equal a float64 recomputation from `attention`'s JSON map of the same sequence."""
    out = tmp / "hs"
    run_cli("drope-analyze", "head-scores", "--model", model_dir, "--task", "offset-key", "--sequences", 1,
            "--length", 48, "--split", "test", "--task-seed", 9, "--out", out)
    res = json.loads((out / "head_scores.json").read_text())
    assert res["task"]["name"] == "offset-key" and res["task"]["split"] == "test" and res["task"]["seed"] == 9
    (seq,) = json.loads((out / "sequences.json").read_text())
    (layout,) = res["task"]["layout"]
    assert len(seq) == 48 and seq[0] == 0 and sorted(layout["colours"]) == [0, 1, 2, 3]
    for c, a, n in zip(layout["colours"], layout["answer_positions"], layout["needle_positions"]):
        assert seq[a] == 69 and seq[a - 1] == 1 + c and seq[a + 1] == seq[n] and (seq[n] - 5) // 16 == c and n < 36
    for h in res["heads"]:
        run_cli("drope-analyze", "attention", "--model", model_dir, "--tokens", out / "sequences.json",
                "--layer", h["layer"], "--head", h["head"], "--out", tmp / f"att{h['layer']}{h['head']}")
        m = json.loads((tmp / f"att{h['layer']}{h['head']}" / f"attention_L{h['layer']}_H{h['head']}.json")
                       .read_text())["map"]
        want = scores_from_map(m, layout)
        assert {k: h[k] for k in want} == pytest.approx(want, rel=1e-9, abs=1e-12), (h["layer"], h["head"])
    # Batching changes nothing; the held-out split (default) gives other sequences.
    for name, extra in (("b1", ["--batch-size", 1]), ("b3", ["--batch-size", 3]), ("ho", [])):
        run_cli("drope-analyze", "head-scores", "--model", model_dir, "--task", "offset-key", "--sequences", 3,
                "--length", 48, *extra, "--out", tmp / name)
    b1, b3, ho = (json.loads((tmp / n / "head_scores.json").read_text()) for n in ("b1", "b3", "ho"))
    assert [pytest.approx(h, rel=1e-9) for h in b1["heads"]] == b3["heads"]
    assert ho["task"]["split"] == "heldout" and json.loads((tmp / "ho" / "sequences.json").read_text())[0] != seq


def test_head_scores_bad_inputs(tmp, model_dir):
    out = tmp / "bad"
    tokens = tmp / "t.json"
    tokens.write_text("[[1, 2, 3]]")
    ok = ("head-scores", "--model", model_dir)
    for extra, needle in ((["--out", out], "exactly one of --tokens"),
                          (["--tokens", tokens, "--task", "offset-key", "--out", out], "exactly one of --tokens"),
                          (["--task", "niah", "--out", out], "--task: expected offset-key"),
                          (["--task", "offset-key", "--split", "dev", "--out", out], "--split"),
                          (["--task", "offset-key", "--length", 10, "--out", out], "at least 17 tokens"),
                          (["--task", "offset-key", "--sequences", 0, "--out", out], "--sequences"),
                          (["--tokens", tokens, "--sequences", 4, "--out", out], "--sequences goes with --task"),
                          (["--tokens", tokens, "--batch-size", 0, "--out", out], "--batch-size"),
                          (["--tokens", tmp / "none.json", "--out", out], "none.json")):
        expect_error(analyze(*ok, *extra), needle)
    one = tmp / "one.json"
    one.write_text("[[5]]")
    expect_error(analyze(*ok, "--tokens", one, "--out", out), "at least 2 tokens")
    small = tmp / "small.yaml"
    small.write_text("preset: micro\nvocab_size: 128\n")
    expect_error(analyze("head-scores", "--config", small, "--task", "offset-key", "--out", out), "small.yaml",
                 "at least 196 token ids")
    assert not out.exists()
