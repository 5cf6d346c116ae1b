"""drope as an HF transformers attention implementation (drope.transformers): tiny random Llama, Qwen2 (with
sliding-window layers) and SmolLM3 models with attn_implementation="drope" against "sdpa" (float32, forward and every
gradient), a DroPE'd SmolLM3 (NoPE everywhere) with drope's softmax temperature, padded batches (the SDPA fallback),
greedy generation from a KV cache, and torch.compile(fullgraph=True) of a model.

Skips when the package is not installed (.venv/bin/pip install --no-build-isolation ./python)."""

import math

import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    SmolLM3Config,
    SmolLM3ForCausalLM,
)

try:
    import drope.transformers

    drope.transformers.register()
except ImportError as e:  # the package is optional outside CI (test_python_ext.py fails when it is required)
    pytest.skip(f"the drope Python package is not installed ({e})", allow_module_level=True)

BASE = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, bos_token_id=1, eos_token_id=2,
            pad_token_id=0)
MODELS = {
    "llama": (LlamaConfig, LlamaForCausalLM, {}),
    "qwen2": (Qwen2Config, Qwen2ForCausalLM, {}),
    "qwen2_sliding": (Qwen2Config, Qwen2ForCausalLM, dict(use_sliding_window=True, sliding_window=8,
                                                           max_window_layers=1)),
    "smollm3": (SmolLM3Config, SmolLM3ForCausalLM, dict(no_rope_layers=[1, 0])),
    "smollm3_drope": (SmolLM3Config, SmolLM3ForCausalLM, dict(no_rope_layers=[0, 0], max_position_embeddings=16)),
}
SEQ = 40


def pair(name, seed=0, **extra):
    """The same random model twice: with attn_implementation "sdpa" and "drope"."""
    cfg_cls, model_cls, kw = MODELS[name]
    models = []
    for impl in ("sdpa", "drope"):
        torch.manual_seed(seed)
        model = model_cls(cfg_cls(**{**BASE, **kw, **extra}, attn_implementation=impl))
        with torch.no_grad():  # every weight random (norms around 1), so that a wrong mapping cannot hide
            for n, p in model.named_parameters():
                p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in n else 0.2 * torch.randn_like(p))
        models.append(model)
    assert models[1].config._attn_implementation == "drope"
    return models


def tokens(batch=2, seq=SEQ, seed=1):
    return torch.randint(3, BASE["vocab_size"], (batch, seq), generator=torch.Generator().manual_seed(seed))


def logits_and_grads(model, ids, **kw):
    model.zero_grad()
    out = model(ids, labels=ids, **kw)
    out.loss.backward()
    return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.fixture
def fused_only(monkeypatch):
    """Fails the test if a call falls back to transformers' SDPA (a mask the op does not take)."""

    def refuse(*args, **kwargs):
        raise AssertionError("drope attention fell back to SDPA")

    monkeypatch.setattr(drope.transformers, "_sdpa_with_mask", refuse)


def assert_same(a, b, tol=1e-5):
    (la, ga), (lb, gb) = a, b
    torch.testing.assert_close(la, lb, rtol=tol, atol=tol)
    for n in ga:
        torch.testing.assert_close(ga[n], gb[n], rtol=tol, atol=tol, msg=lambda m, n=n: f"{n}: {m}")


@pytest.mark.parametrize("name", ["llama", "qwen2", "qwen2_sliding", "smollm3"])
def test_forward_backward_matches_sdpa(name, fused_only):
    sdpa, ours = pair(name)
    ids = tokens()
    assert_same(logits_and_grads(ours, ids), logits_and_grads(sdpa, ids))


def test_drope_temperature_on_a_nope_model(fused_only):
    """A DroPE'd model beyond its training length: drope's temperature equals SDPA with every layer's scale times
    beta = 1 + c ln(S / C)."""
    c = 0.4
    sdpa, ours = pair("smollm3_drope", drope_softmax_temperature=c)
    beta = 1 + c * math.log(SEQ / 16)
    assert drope.transformers.softmax_temperature(ours.config, SEQ) == pytest.approx(beta)
    for layer in sdpa.model.layers:
        layer.self_attn.scaling *= beta
    ids = tokens()
    assert_same(logits_and_grads(ours, ids), logits_and_grads(sdpa, ids))
    short = tokens(seq=12)  # within the training length: no temperature
    for layer in sdpa.model.layers:
        layer.self_attn.scaling /= beta
    with torch.no_grad():
        torch.testing.assert_close(ours(short).logits, sdpa(short).logits, rtol=1e-5, atol=1e-5)


def test_padded_batch_falls_back_to_sdpa(monkeypatch):
    calls = []
    fallback = drope.transformers._sdpa_with_mask
    monkeypatch.setattr(drope.transformers, "_sdpa_with_mask", lambda *a, **k: calls.append(1) or fallback(*a, **k))
    sdpa, ours = pair("qwen2_sliding")
    ids = tokens()
    mask = torch.ones_like(ids)
    mask[0, :5] = 0  # left padding of the first row
    assert_same(logits_and_grads(ours, ids, attention_mask=mask), logits_and_grads(sdpa, ids, attention_mask=mask))
    assert len(calls) == BASE["num_hidden_layers"]


@pytest.mark.parametrize("name", ["llama", "qwen2_sliding"])
def test_greedy_generation_from_a_kv_cache(name, fused_only):
    sdpa, ours = (m.eval() for m in pair(name))
    ids = tokens(batch=1, seq=12)
    kw = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        torch.testing.assert_close(ours.generate(ids, **kw), sdpa.generate(ids, **kw))


def test_compile_fullgraph_model_matches_eager(fused_only):
    """torch.compile(fullgraph=True) traces a model that uses drope (fake implementations, autograd) without graph
    breaks; loss and gradients match eager."""
    _, ours = pair("llama")
    ids = tokens(seq=16)
    eager = logits_and_grads(ours, ids)

    def step(ids):
        return ours(ids, labels=ids).loss

    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    ours.zero_grad()
    loss = compiled(ids)
    loss.backward()
    torch.testing.assert_close(loss.detach(), torch.nn.functional.cross_entropy(
        eager[0][:, :-1].reshape(-1, BASE["vocab_size"]), ids[:, 1:].reshape(-1)), rtol=1e-5, atol=1e-5)
    for n, p in ours.named_parameters():
        torch.testing.assert_close(p.grad, eager[1][n], rtol=1e-5, atol=1e-5)
