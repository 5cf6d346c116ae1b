"""Bad input at the CLI edge: every case exits non-zero with one clear line naming the file/key, never
crashes, and leaves no output file behind."""
import json
import struct

import numpy as np
import pytest

from conftest import expect_error, run_cli


@pytest.fixture
def model_dir(tmp):
    run_cli("drope-model", "init", "--preset", "micro", "--out", tmp / "m")
    return tmp / "m"


def logits(model, tokens, out):
    return run_cli("drope-eval", "logits", "--model", model, "--tokens", tokens, "--out", out, check=False)


def test_logits_token_file_errors(tmp, model_dir):
    out = tmp / "out.safetensors"
    cases = {
        "missing.json": (None, ["missing.json", "not found"]),
        "malformed.json": ("[[1, 2, 3]", ["malformed.json", "not valid JSON"]),
        "ragged.json": (json.dumps([[1, 2, 3], [4, 5]]), ["ragged.json", "entry 1 has 2 tokens"]),
        "vocab.json": (json.dumps([[1, 2, 999]]), ["vocab.json", "token id 999", "[0, 256)"]),
        "negative.json": (json.dumps([[1, -2]]), ["negative.json", "token id -2"]),
        "float.json": (json.dumps([[1, 2.5]]), ["float.json", "position 1", "integer"]),
        "empty.json": ("[]", ["empty.json", "non-empty"]),
        "object.json": ('{"tokens": [1]}', ["object.json", "list"]),
    }
    for name, (text, needles) in cases.items():
        if text is not None:
            (tmp / name).write_text(text)
        expect_error(logits(model_dir, tmp / name, out), *needles)
        assert not out.exists()
    assert not list(tmp.glob("out.safetensors*"))


def test_model_dir_errors(tmp, model_dir):
    toks = tmp / "t.json"
    toks.write_text(json.dumps([[1, 2, 3]]))
    out = tmp / "out.safetensors"
    expect_error(logits(tmp / "nowhere", toks, out), "nowhere", "not found")
    # Truncated safetensors.
    data = (model_dir / "model.safetensors").read_bytes()
    (model_dir / "model.safetensors").write_bytes(data[:100])
    expect_error(logits(model_dir, toks, out), "model.safetensors", "truncated")
    # Header length pointing past the end.
    (model_dir / "model.safetensors").write_bytes(struct.pack("<Q", 10**6) + b"{}")
    expect_error(logits(model_dir, toks, out), "model.safetensors", "header claims")
    # Missing tensor and wrong shape, written with the real safetensors package.
    from safetensors.numpy import save_file

    good = {f"model.layers.{i}.self_attn.q_proj.weight": np.zeros((64, 64), np.float32) for i in range(2)}
    save_file(good, str(model_dir / "model.safetensors"))
    expect_error(logits(model_dir, toks, out), "missing tensor", "model.embed_tokens.weight")
    run_cli("drope-model", "init", "--preset", "micro", "--out", tmp / "m2")
    from safetensors.numpy import load_file

    w = load_file(str(tmp / "m2" / "model.safetensors"))
    w["model.layers.1.mlp.down_proj.weight"] = np.zeros((64, 100), np.float32)
    save_file(w, str(tmp / "m2" / "model.safetensors"))
    expect_error(logits(tmp / "m2", toks, out), "model.layers.1.mlp.down_proj.weight", "[64, 100]", "[64, 128]")
    (tmp / "m2" / "drope.yaml").write_text("arch: llama\nhidden_sise: 3\n")
    expect_error(logits(tmp / "m2", toks, out), "drope.yaml:2", "hidden_sise", "unknown key")
    (tmp / "m2" / "drope.yaml").unlink()
    (tmp / "m2" / "config.json").write_text('{"model_type": "llama", "hidden_size": ')
    expect_error(logits(tmp / "m2", toks, out), "config.json", "not valid JSON")
    assert not out.exists()


def test_config_errors(tmp):
    cases = {
        "unknown.yaml": ("model:\n  preset: tiny\n  num_layer: 3\n", ["unknown.yaml:3", "model.num_layer", "num_layers"]),
        "type.yaml": ("model:\n  preset: tiny\n  tie_embeddings: maybe\n", ["type.yaml:3", "tie_embeddings", "true or false"]),
        "malformed.yaml": ("model:\n  preset: tiny\n   bad: [\n", ["malformed.yaml", "malformed YAML"]),
        "preset.yaml": ("model:\n  preset: huge\n", ["preset.yaml:2", "unknown model preset 'huge'"]),
        "scaling.yaml": ("model:\n  preset: tiny\n  positional:\n    scaling: {type: longrope}\n",
                         ["scaling.yaml:4", "positional.scaling.type", "longrope"]),
    }
    for name, (text, needles) in cases.items():
        (tmp / name).write_text(text)
        expect_error(run_cli("drope-model", "init", "--config", tmp / name, "--out", tmp / "o", check=False), *needles)
        assert not (tmp / "o").exists()


def test_usage_errors(tmp):
    r = run_cli("drope-eval", "logits", "--model", tmp, check=False)
    assert r.returncode != 0 and "--tokens" in r.stderr + r.stdout
    r = run_cli("drope-model", "drop", "--model", tmp, "--out", tmp / "x", "--qk-norm", "both", check=False)
    assert r.returncode != 0 and "qk-norm" in r.stderr + r.stdout
    expect_error(run_cli("drope-analyze", "rope-scaling", "--type", "yarn", "--factor", "0.5", check=False), "--factor")
