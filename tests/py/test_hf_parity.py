"""Parity with HF transformers (random weights, no downloads): logits of Llama/Qwen2-shaped models for
every rope_scaling type, sharded and bf16 checkpoints, and export round trips that transformers loads."""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from conftest import our_logits, run_cli

BASE = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=32, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2)
SEQ = 48  # longer than max_position_embeddings so dynamic/yarn/llama3 scaling matters

CASES = {
    "llama_gqa_tied": (LlamaConfig, LlamaForCausalLM, dict(tie_word_embeddings=True)),
    "llama_mha_untied": (LlamaConfig, LlamaForCausalLM, dict(num_key_value_heads=4)),
    "llama_mqa_bias": (LlamaConfig, LlamaForCausalLM, dict(num_key_value_heads=1, attention_bias=True, mlp_bias=True)),
    "llama_theta_1e6_headdim": (LlamaConfig, LlamaForCausalLM, dict(rope_theta=1e6, head_dim=32)),
    "llama_linear": (LlamaConfig, LlamaForCausalLM, dict(rope_scaling={"rope_type": "linear", "factor": 2.0})),
    "llama_dynamic": (LlamaConfig, LlamaForCausalLM, dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0})),
    "llama_yarn": (LlamaConfig, LlamaForCausalLM,
                   dict(rope_scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16})),
    "llama_yarn_attn_factor": (LlamaConfig, LlamaForCausalLM,
                               dict(rope_scaling={"rope_type": "yarn", "factor": 3.0, "beta_fast": 16.0,
                                                  "beta_slow": 2.0, "attention_factor": 1.3,
                                                  "original_max_position_embeddings": 16})),
    "llama_llama3": (LlamaConfig, LlamaForCausalLM,
                     dict(rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                        "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
    "qwen2_untied": (Qwen2Config, Qwen2ForCausalLM, dict(tie_word_embeddings=False)),
    "qwen2_tied_yarn": (Qwen2Config, Qwen2ForCausalLM,
                        dict(tie_word_embeddings=True,
                             rope_scaling={"rope_type": "yarn", "factor": 2.0,
                                           "original_max_position_embeddings": 24})),
}


def make_model(name, seed=0):
    cfg_cls, model_cls, extra = CASES[name]
    torch.manual_seed(seed)
    model = model_cls(cfg_cls(**{**BASE, **extra}, attn_implementation="eager")).eval()
    with torch.no_grad():  # every tensor random (norms around 1) so a wrong mapping cannot hide
        for n, p in model.named_parameters():
            p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in n else 0.2 * torch.randn_like(p))
    return model


def hf_logits(model, tokens):
    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.float().numpy()


def tokens(seed=1, batch=2, seq=SEQ):
    g = np.random.default_rng(seed)
    return g.integers(0, BASE["vocab_size"], size=(batch, seq)).tolist()


def rel_err(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_transformers(name, tmp):
    model = make_model(name)
    model.save_pretrained(tmp / "hf")
    toks = tokens()
    ref = hf_logits(model, toks)
    got = our_logits(tmp / "hf", toks, tmp)
    assert got.shape == ref.shape
    assert rel_err(got, ref) < 1e-4, f"{name}: max relative error {rel_err(got, ref):.3e}"


@pytest.mark.parametrize("name", ["llama_gqa_tied", "qwen2_untied", "llama_yarn", "llama_dynamic"])
def test_export_round_trip_loads_in_transformers(name, tmp):
    model = make_model(name, seed=3)
    model.save_pretrained(tmp / "hf")
    run_cli("drope-model", "convert", "--model", tmp / "hf", "--out", tmp / "ours")
    back = AutoModelForCausalLM.from_pretrained(tmp / "ours", dtype=torch.float32, attn_implementation="eager").eval()
    toks = tokens(seed=4)
    a, b = hf_logits(model, toks), hf_logits(back, toks)
    assert np.array_equal(a, b), f"round trip changed logits by {np.abs(a - b).max():.3e}"


def test_our_init_loads_in_transformers(tmp):
    cfg = tmp / "m.yaml"
    cfg.write_text("model:\n  preset: micro\n  tie_embeddings: false\n  init_std: 0.2\n"
                   "  positional:\n    rope_theta: 50000\n"
                   "    scaling: {type: yarn, factor: 2, original_max_position: 32}\n")
    run_cli("drope-model", "init", "--config", cfg, "--seed", 5, "--out", tmp / "ours")
    hf = AutoModelForCausalLM.from_pretrained(tmp / "ours", dtype=torch.float32, attn_implementation="eager").eval()
    assert hf.config.rope_parameters["rope_type"] == "yarn"
    toks = np.random.default_rng(2).integers(0, 256, size=(2, 80)).tolist()
    ref = hf_logits(hf, toks)
    got = our_logits(tmp / "ours", toks, tmp)
    assert rel_err(got, ref) < 1e-4


def test_sharded_and_bf16_checkpoints(tmp):
    model = make_model("llama_mha_untied", seed=6)
    model.save_pretrained(tmp / "sharded", max_shard_size="40KB")
    assert (tmp / "sharded" / "model.safetensors.index.json").exists()
    assert len(list((tmp / "sharded").glob("model-*.safetensors"))) > 1
    toks = tokens(seed=7)
    assert rel_err(our_logits(tmp / "sharded", toks, tmp), hf_logits(model, toks)) < 1e-4
    model.to(torch.bfloat16).save_pretrained(tmp / "bf16")
    hf32 = AutoModelForCausalLM.from_pretrained(tmp / "bf16", dtype=torch.float32, attn_implementation="eager").eval()
    assert rel_err(our_logits(tmp / "bf16", toks, tmp), hf_logits(hf32, toks)) < 1e-4


def test_drope_transform_keeps_weights(tmp):
    from safetensors.numpy import load_file

    model = make_model("llama_gqa_tied", seed=8)
    model.save_pretrained(tmp / "hf")
    run_cli("drope-model", "drop", "--model", tmp / "hf", "--out", tmp / "drope", "--qk-norm", "qk")
    assert not (tmp / "drope" / "config.json").exists()  # HF cannot express NoPE + QK-norm
    assert "type: nope" in (tmp / "drope" / "drope.yaml").read_text()
    src = load_file(str(tmp / "hf" / "model.safetensors"))
    dst = load_file(str(tmp / "drope" / "model.safetensors"))
    for k, v in src.items():
        assert np.array_equal(dst[k], v), k
    new = set(dst) - set(src)
    assert new == {f"model.layers.{i}.self_attn.{n}_norm.weight" for i in range(2) for n in "qk"}
    assert all(np.all(dst[k] == 1.0) for k in new)
    toks = tokens(seed=9, seq=16)
    assert rel_err(our_logits(tmp / "drope", toks, tmp), hf_logits(model, toks)) > 1e-3
