"""The DroPE authors' checkpoint format (SakanaAI/DroPE, custom_models/drope.py and attention.py at 260a8bb):
model_type llama_drope / qwen2_drope, attention_type nope | qk_norm_nope | q_norm_nope | k_norm_nope, optional
softmax_scale. The reference semantics are rebuilt on transformers' own Llama / Qwen2 attention the way the
authors' code builds them (scripts/drope_scripts/drope_reference.py: subclasses of LlamaAttention /
Qwen2Attention with the identity rotation cos = 1, sin = 0; torch.nn.RMSNorm over the whole q / k projection
before the split into heads, both norms created even when only one is applied; `scaling` replaced by
softmax_scale), here with random weights. Our import must match their logits, and our export
(`--format drope-reference`) must load strictly into them."""
import json

import numpy as np
import pytest
import torch
from safetensors.numpy import load_file as load_numpy
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM

from conftest import expect_error, expect_model_dir_error, our_logits, run_cli
from drope_scripts.drope_reference import ARCH, logits, model_from_config, rel_err
from drope_scripts.drope_reference import load as load_reference

BASE = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)


def reference_model(arch, attention_type="nope", softmax_scale=None, seed=0, **extra):
    """A DroPE{Llama,Qwen2}ForCausalLM as the authors' _create_drope_model_class builds it, random weights."""
    torch.manual_seed(seed)
    model = model_from_config(arch, attention_type, softmax_scale, **{**BASE, **extra})
    with torch.no_grad():  # every tensor random (norms around 1), the unused norm included
        for n, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in n else 0.2 * torch.randn_like(p))
    return model.eval()


def save_reference(model, d):
    """save_pretrained + the authors' config keys (their DroPEConfig: model_type <arch>_drope, the custom fields)."""
    model.save_pretrained(d)
    cfg = json.loads((d / "config.json").read_text())
    arch = cfg["model_type"]
    cfg["model_type"] = arch + "_drope"
    cfg["architectures"] = ["DroPE" + ("Llama" if arch == "llama" else "Qwen2") + "ForCausalLM"]
    cfg["attention_type"] = model.config.attention_type
    if hasattr(model.config, "softmax_scale"):
        cfg["softmax_scale"] = model.config.softmax_scale
    (d / "config.json").write_text(json.dumps(cfg, indent=2))


def tokens(seed=1, batch=2, seq=40):
    return np.random.default_rng(seed).integers(0, BASE["vocab_size"], size=(batch, seq)).tolist()


CASES = {
    "llama_nope": ("llama", "nope", None, {}),
    "llama_qk_norm": ("llama", "qk_norm_nope", None, {}),
    "llama_q_norm_scale": ("llama", "q_norm_nope", 0.31, {}),
    "llama_k_norm_untied": ("llama", "k_norm_nope", None, dict(tie_word_embeddings=False)),
    "llama_nope_scale_yarn": ("llama", "nope", 0.2, dict(rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                                        "original_max_position_embeddings": 16})),
    "qwen2_qk_norm_scale": ("qwen2", "qk_norm_nope", 0.5, dict(tie_word_embeddings=True)),
    "qwen2_nope": ("qwen2", "nope", None, {}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_reference_checkpoints_match_their_logits(name, tmp):
    arch, attention_type, scale, extra = CASES[name]
    model = reference_model(arch, attention_type, scale, seed=3, **extra)
    save_reference(model, tmp / "ref")
    toks = tokens()
    ref = logits(model, toks)
    r = run_cli("drope-model", "info", "--model", tmp / "ref")
    assert "positional nope" in r.stdout
    assert ("unused" in r.stderr or "ignoring" in r.stderr) == (attention_type in ("q_norm_nope", "k_norm_nope"))
    got = our_logits(tmp / "ref", toks, tmp)
    assert rel_err(got, ref) < 1e-4, f"{name}: max relative error {rel_err(got, ref):.3e}"
    # The RoPE model with the same weights differs: the import really dropped the rotation.
    rope = ARCH[arch][1](model.config).eval()
    rope.load_state_dict(model.state_dict(), strict=False)
    assert rel_err(logits(rope, toks), ref) > 1e-3


def test_the_unused_norm_is_reported_once(tmp):
    model = reference_model("llama", "q_norm_nope", seed=4)
    save_reference(model, tmp / "ref")
    r = run_cli("drope-model", "info", "--model", tmp / "ref")
    warnings = [line for line in r.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, r.stderr
    assert "config.json" in warnings[0] and "self_attn.k_norm.weight" in warnings[0] and "2 layer" in warnings[0]


@pytest.mark.parametrize("name", ["llama_q_norm_scale", "llama_k_norm_untied", "qwen2_qk_norm_scale", "llama_nope"])
def test_export_round_trip(name, tmp):
    arch, attention_type, scale, extra = CASES[name]
    model = reference_model(arch, attention_type, scale, seed=5, **extra)
    save_reference(model, tmp / "ref")
    run_cli("drope-model", "convert", "--model", tmp / "ref", "--out", tmp / "ours")  # our format in between
    assert (tmp / "ours" / "drope.yaml").exists() and not (tmp / "ours" / "config.json").exists()
    run_cli("drope-model", "convert", "--model", tmp / "ours", "--out", tmp / "back", "--format", "drope-reference")
    assert sorted(p.name for p in (tmp / "back").iterdir()) == ["config.json", "model.safetensors"]
    cfg = json.loads((tmp / "back" / "config.json").read_text())
    assert cfg["model_type"] == arch + "_drope" and cfg["attention_type"] == attention_type
    assert cfg.get("softmax_scale") == scale
    back = load_reference(tmp / "back")  # strict: every tensor the authors' model has, nothing else
    toks = tokens(seed=6)
    ref = logits(model, toks)
    assert rel_err(logits(back, toks), ref) < 1e-5
    assert rel_err(our_logits(tmp / "back", toks, tmp), ref) < 1e-4
    # Every tensor the reference stored and uses comes back bit for bit; the unused norm is written as the
    # authors' code creates it (weight 1).
    src, dst = load_numpy(str(tmp / "ref" / "model.safetensors")), load_numpy(str(tmp / "back" / "model.safetensors"))
    assert set(src) == set(dst)
    unused = {"q_norm_nope": "k_norm", "k_norm_nope": "q_norm"}.get(attention_type)
    for k, v in src.items():
        if unused and unused in k:
            assert np.all(dst[k] == 1.0), k
        else:
            assert np.array_equal(dst[k], v), k


def test_drop_exports_straight_to_the_reference_format(tmp):
    torch.manual_seed(7)
    hf = LlamaForCausalLM(LlamaConfig(**BASE, attn_implementation="eager")).eval()
    hf.save_pretrained(tmp / "hf")
    run_cli("drope-model", "drop", "--model", tmp / "hf", "--qk-norm", "k", "--out", tmp / "ref",
            "--format", "drope-reference")
    cfg = json.loads((tmp / "ref" / "config.json").read_text())
    assert cfg["attention_type"] == "k_norm_nope" and "softmax_scale" not in cfg
    model = load_reference(tmp / "ref")
    toks = tokens(seed=8)
    assert rel_err(our_logits(tmp / "ref", toks, tmp), logits(model, toks)) < 1e-4


def write_config(d, **changes):
    d.mkdir(parents=True, exist_ok=True)
    cfg = {"model_type": "llama_drope", **BASE, "attention_type": "nope"}
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@pytest.mark.parametrize("changes,needles", [
    (dict(attention_type="qkv_norm_nope"), ["attention_type", "qkv_norm_nope", "q_norm_nope"]),
    (dict(attention_type=3), ["attention_type", "wrong type"]),
    (dict(softmax_scale=0), ["softmax_scale"]),
    (dict(softmax_scale=-0.5), ["softmax_scale"]),
    (dict(softmax_scale="0.1"), ["softmax_scale", "number"]),
    (dict(model_type="mistral_drope"), ["model_type", "mistral_drope"]),
])
def test_bad_reference_configs(changes, needles, tmp):
    d = write_config(tmp / "bad", **changes)
    expect_model_dir_error(d, tmp, str(d / "config.json"), *needles)


def test_overflowing_softmax_scale_is_refused(tmp):
    d = tmp / "inf"
    d.mkdir()
    text = json.dumps({"model_type": "llama_drope", **BASE})
    (d / "config.json").write_text(text[:-1] + ', "softmax_scale": 1e400}')  # JSON number beyond a double
    expect_model_dir_error(d, tmp, str(d / "config.json"))


def test_unused_norm_with_the_wrong_shape_is_refused(tmp):
    model = reference_model("llama", "q_norm_nope", seed=9)
    save_reference(model, tmp / "ref")
    state = load_file(str(tmp / "ref" / "model.safetensors"))
    state["model.layers.1.self_attn.k_norm.weight"] = torch.ones(7)
    from safetensors.torch import save_file
    save_file(state, str(tmp / "ref" / "model.safetensors"))
    expect_error(run_cli("drope-model", "info", "--model", tmp / "ref", check=False),
                 "model.layers.1.self_attn.k_norm.weight", "[7]")


def test_export_refuses_what_the_format_cannot_express(tmp):
    torch.manual_seed(10)
    LlamaForCausalLM(LlamaConfig(**BASE)).save_pretrained(tmp / "hf")
    r = run_cli("drope-model", "convert", "--model", tmp / "hf", "--out", tmp / "x", "--format", "drope-reference",
                check=False)
    expect_error(r, "drope-reference", "layer 0 is RoPE")
    assert not (tmp / "x").exists()
    r = run_cli("drope-model", "drop", "--model", tmp / "hf", "--qk-norm", "qk", "--per-head", "--out", tmp / "x",
                "--format", "drope-reference", check=False)
    expect_error(r, "drope-reference", "per head")
    assert not (tmp / "x").exists()
    r = run_cli("drope-model", "convert", "--model", tmp / "hf", "--out", tmp / "x", "--format", "gguf", check=False)
    expect_error(r, "--format", "gguf")
