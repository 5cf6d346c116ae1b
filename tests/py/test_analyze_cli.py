"""drope-analyze at the CLI edge: bad inputs end with one clear line and no crash; bias-grad, constant-seq,
attention and rope-scaling --out write their files."""
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
