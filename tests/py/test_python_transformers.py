"""drope as an HF transformers attention implementation (drope.transformers): tiny random Llama, Qwen2 (with
sliding-window layers) and SmolLM3 models with attn_implementation="drope" against "sdpa" (float32, forward and every
gradient), a DroPE'd SmolLM3 (NoPE everywhere) and Llama 4 with drope's softmax temperature (static caches, padded
and packed rows, with and without positions), padded batches (the SDPA fallback), greedy generation from a KV cache,
torch.compile(fullgraph=True) of a model, local attention that only the mask carries (Qwen2-MoE, PhiMoE, Llama 4's
chunks), a window the mask does not carry (OLMoE), output_attentions and encoder-decoder cross-attention.

Skips when the package is not installed (.venv/bin/pip install --no-build-isolation ./python)."""

import math

import numpy as np
import pytest
import torch
from transformers import (
    BartConfig,
    BartForConditionalGeneration,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    EncoderDecoderCache,
    Gemma2Config,
    Gemma2ForCausalLM,
    GptOssConfig,
    GptOssForCausalLM,
    Llama4ForCausalLM,
    Llama4TextConfig,
    LlamaConfig,
    LlamaForCausalLM,
    ModernBertConfig,
    ModernBertModel,
    OlmoeConfig,
    OlmoeForCausalLM,
    PhimoeConfig,
    PhimoeForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen2MoeConfig,
    Qwen2MoeForCausalLM,
    SmolLM3Config,
    SmolLM3ForCausalLM,
    StaticCache,
    T5Config,
    T5ForConditionalGeneration,
)
from transformers.integrations.sdpa_attention import sdpa_attention_forward

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
    # attention sinks (s_aux) and a sliding layer; gpt-oss has no SDPA path: its reference is "eager"
    "gpt_oss": (GptOssConfig, GptOssForCausalLM, dict(head_dim=16, num_local_experts=2, num_experts_per_tok=1,
                                                      sliding_window=8, intermediate_size=64)),
    # logit soft-capping (SDPA refuses it: "eager" is the reference)
    "gemma2": (Gemma2Config, Gemma2ForCausalLM, dict(head_dim=16, sliding_window=8, attn_logit_softcapping=5.0)),
    # local attention that reaches the attention function only through the mask: sliding-window layers that do not
    # pass `sliding_window` (Qwen2-MoE, PhiMoE) and Llama 4's attention chunks
    "qwen2_moe_sliding": (Qwen2MoeConfig, Qwen2MoeForCausalLM, dict(
        use_sliding_window=True, sliding_window=8, max_window_layers=1, num_experts=2, num_experts_per_tok=1,
        moe_intermediate_size=32, shared_expert_intermediate_size=32)),
    "phimoe_sliding": (PhimoeConfig, PhimoeForCausalLM, dict(sliding_window=8, num_local_experts=2,
                                                             num_experts_per_tok=1)),
    # multi-head latent attention: v's head dim (8) is not q's and k's (24)
    "deepseek_v3": (DeepseekV3Config, DeepseekV3ForCausalLM, dict(
        kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=8, n_routed_experts=2,
        num_experts_per_tok=1, n_group=1, topk_group=1, first_k_dense_replace=2, moe_intermediate_size=32,
        num_key_value_heads=4)),
    "llama4_chunked": (Llama4TextConfig, Llama4ForCausalLM, dict(
        attention_chunk_size=8, num_local_experts=2, num_experts_per_tok=1, intermediate_size_mlp=96, head_dim=16,
        no_rope_layers=[1, 1], layer_types=["chunked_attention", "full_attention"])),
    # Llama 4's NoPE layers, DroPE'd: its decoder passes neither position_ids nor cache_position to attention
    "llama4_drope": (Llama4TextConfig, Llama4ForCausalLM, dict(
        attention_chunk_size=1024, num_local_experts=2, num_experts_per_tok=1, intermediate_size_mlp=96, head_dim=16,
        no_rope_layers=[0, 0], layer_types=["full_attention"] * 2, max_position_embeddings=16)),
    # OLMoE passes config.sliding_window to attention but builds a plain causal mask: it does not slide
    "olmoe_window": (OlmoeConfig, OlmoeForCausalLM, dict(num_experts=2, num_experts_per_tok=1, sliding_window=4)),
}
SEQ = 40


def pair(name, seed=0, reference="sdpa", **extra):
    """The same random model twice: with attn_implementation `reference` ("sdpa" or "eager") and "drope"."""
    cfg_cls, model_cls, kw = MODELS[name]
    models = []
    for impl in (reference, "drope"):
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

    monkeypatch.setattr(drope.transformers, "_route", refuse)


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


def nope_model(c=0.4):
    _, ours = pair("smollm3_drope", drope_softmax_temperature=c)
    return ours.eval()


@pytest.mark.parametrize("prompt", [12, 24])  # within C = 16, and beyond it
def test_temperature_counts_tokens_not_cache_slots(prompt):
    """beta comes from the tokens so far, as drope's model counts them: a static cache's empty slots (64 here) and
    the cache's type change nothing, in the prefill or in any decoding step."""
    model = nope_model()
    ids = tokens(batch=1, seq=prompt)
    kw = dict(max_new_tokens=8, do_sample=False, output_scores=True, return_dict_in_generate=True)
    with torch.no_grad():
        full = model(ids).logits
        static = model(ids, past_key_values=StaticCache(config=model.config, max_cache_len=64), use_cache=True).logits
        torch.testing.assert_close(static, full, rtol=1e-5, atol=1e-5)
        dyn = model.generate(ids, **kw)
        stat = model.generate(ids, cache_implementation="static", **kw)
        torch.testing.assert_close(stat.sequences, dyn.sequences)
        for a, b in zip(stat.scores, dyn.scores):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_temperature_is_per_row_in_a_left_padded_batch():
    """Each row's beta counts its own tokens (generate's position_ids leave the padding out), so a prompt's greedy
    continuation and scores do not depend on the longer row it is batched with."""
    model = nope_model()
    long, short = tokens(batch=1, seq=24, seed=1), tokens(batch=1, seq=12, seed=2)
    batch = torch.cat([long, torch.cat([torch.zeros(1, 12, dtype=torch.long), short], 1)])
    mask = (batch != 0).long()
    mask[0] = 1
    kw = dict(max_new_tokens=8, do_sample=False, output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    with torch.no_grad():
        alone = model.generate(short, **kw)
        both = model.generate(batch, attention_mask=mask, **kw)
    torch.testing.assert_close(both.sequences[1, 24:], alone.sequences[0, 12:])
    for a, b in zip(alone.scores, both.scores):
        torch.testing.assert_close(b[1], a[0], rtol=1e-5, atol=1e-5)


def test_temperature_without_positions_counts_the_mask_not_cache_slots():
    """Llama 4 passes no positions to attention: each row's L is then the keys its mask lets it see, so a static
    cache's empty slots and a left-padded row's padding do not count (prefill, every decoding step), and a padded row
    continues as it does alone."""
    _, model = pair("llama4_drope", drope_softmax_temperature=0.4)
    model.eval()
    ids = tokens(batch=1, seq=24)
    kw = dict(max_new_tokens=6, do_sample=False, output_scores=True, return_dict_in_generate=True, pad_token_id=0)
    long, short = tokens(batch=1, seq=24, seed=1), tokens(batch=1, seq=12, seed=2)
    batch = torch.cat([long, torch.cat([torch.zeros(1, 12, dtype=torch.long), short], 1)])
    mask = (batch != 0).long()
    mask[0] = 1
    with torch.no_grad():
        full = model(ids).logits
        static = model(ids, past_key_values=StaticCache(config=model.config, max_cache_len=64), use_cache=True).logits
        dyn = model.generate(ids, **kw)
        stat = model.generate(ids, cache_implementation="static", **kw)
        alone = model.generate(short, **kw)
        both = model.generate(batch, attention_mask=mask, **kw)
    torch.testing.assert_close(static, full, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(stat.sequences, dyn.sequences)
    torch.testing.assert_close(both.sequences[1, 24:], alone.sequences[0, 12:])
    for a, b in zip(stat.scores, dyn.scores):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(alone.scores, both.scores):
        torch.testing.assert_close(b[1], a[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("side", ["left", "right"])
def test_temperature_of_a_padded_forward_without_position_ids(side):
    """model(ids, attention_mask=mask), as in scoring and training: positions then count the padding (transformers
    makes them from the cache positions), and the mask bounds each row's L by its own tokens."""
    model = nope_model()
    long, short = tokens(batch=1, seq=24, seed=1), tokens(batch=1, seq=12, seed=2)
    pad = torch.zeros(1, 12, dtype=torch.long)
    batch = torch.cat([long, torch.cat([pad, short] if side == "left" else [short, pad], 1)])
    mask = (batch != 0).long()
    mask[0] = 1
    own = slice(12, 24) if side == "left" else slice(0, 12)
    with torch.no_grad():
        alone = model(short).logits[0]
        padded = model(batch, attention_mask=mask).logits
        torch.testing.assert_close(padded[1, own], alone, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(padded[0], model(long).logits[0], rtol=1e-5, atol=1e-5)


def test_packed_sequences_each_get_their_own_temperature():
    """A packed row (positions restarting at 0; transformers builds their block mask without a cache): each sequence
    gets the beta of its own length, so each is computed as it is alone."""
    model = nope_model()
    a, b = tokens(batch=1, seq=10, seed=1), tokens(batch=1, seq=30, seed=2)
    pos = torch.cat([torch.arange(10), torch.arange(30)]).view(1, -1)
    with torch.no_grad():
        packed = model(torch.cat([a, b], 1), position_ids=pos, use_cache=False).logits[0]
        torch.testing.assert_close(packed[:10], model(a).logits[0], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(packed[10:], model(b).logits[0], rtol=1e-5, atol=1e-5)


def test_padded_batch_falls_back_to_sdpa(monkeypatch):
    calls = []
    fallback = drope.transformers._route
    monkeypatch.setattr(drope.transformers, "_route", lambda *a, **k: calls.append(1) or fallback(*a, **k))
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


@pytest.mark.parametrize("c", [None, 0.4])
def test_compile_fullgraph_dynamic_shapes(c, fused_only):
    """torch.compile(fullgraph=True, dynamic=True): the scale and the temperature are symbolic there, and the checks
    on them must trace (math.isfinite does not)."""
    model = nope_model(c) if c else pair("llama")[1].eval()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager", dynamic=True)
    with torch.no_grad():
        for seq in (12, 24):
            ids = tokens(batch=1, seq=seq)
            torch.testing.assert_close(compiled(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name, routed", [("gpt_oss", "s_aux"), ("gemma2", "softcap")])
def test_sinks_and_soft_capping_match_eager(name, routed, monkeypatch):
    """Attention sinks (gpt-oss's s_aux) and logit soft-capping (Gemma 2) are not dropped: such calls run the
    model's own eager function (with drope's temperature), so logits and gradients equal attn_implementation
    "eager"'s."""
    seen = []
    route = drope.transformers._route
    monkeypatch.setattr(drope.transformers, "_route", lambda *a, **k: seen.append(sorted(a[10])) or route(*a, **k))
    eager, ours = pair(name, reference="eager")
    ids = tokens()
    assert_same(logits_and_grads(ours, ids), logits_and_grads(eager, ids))
    assert seen and all(routed in s for s in seen), seen


def test_sinks_change_the_output():
    """The sinks matter (so the test above can fail): zeroing gpt-oss's sinks changes its logits."""
    _, ours = pair("gpt_oss", reference="eager")
    ids = tokens(batch=1, seq=12)
    with torch.no_grad():
        before = ours(ids).logits
        for layer in ours.model.layers:
            layer.self_attn.sinks.fill_(-1e4)
        assert (ours(ids).logits - before).abs().max() > 1e-3


def modernbert_pair(seed=0, dtype=torch.float32):
    models = []
    for impl in ("sdpa", "drope"):
        torch.manual_seed(seed)
        cfg = ModernBertConfig(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                               num_attention_heads=4, local_attention=8, global_attn_every_n_layers=3,
                               max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                               cls_token_id=1, sep_token_id=2, attn_implementation=impl)
        model = ModernBertModel(cfg)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(1.0 + 0.2 * torch.randn_like(p) if "norm" in n else 0.2 * torch.randn_like(p))
        models.append(model.to(dtype))
    return models


@pytest.mark.parametrize("seq", [6, 40])
def test_modernbert_two_sided_windows_match_sdpa(seq):
    """ModernBERT's local layers see a two-sided window (|i - j| <= local_attention / 2): drope equals "sdpa" below
    and beyond the window, forward and backward. In float64, where both are exact to about 1e-15 (in float32 the
    two differ by float32 rounding, about 1e-5 of the largest gradient, as each differs from float64), so that a
    one-sided window (6e-3 off) or any other mistake shows."""
    sdpa, ours = modernbert_pair(dtype=torch.float64)
    ids = tokens(seq=seq)
    outs = []
    for model in (ours, sdpa):
        model.zero_grad()
        h = model(ids).last_hidden_state
        (h * torch.linspace(-1, 1, h.shape[-1], dtype=h.dtype)).sum().backward()
        outs.append((h.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert_same(*outs, tol=1e-10)


def call_kwargs(T=10, S=10, H=4, Hkv=2, D=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, H, T, D, generator=g)
    k, v = (torch.randn(2, Hkv, S, D, generator=g) for _ in "kv")
    module = torch.nn.Module()
    module.num_key_value_groups = H // Hkv
    module.is_causal = True
    return module, q, k, v


def eager_reference(q, k, v, visible, scale):
    G = q.shape[1] // k.shape[1]
    bias = torch.zeros(visible.shape).masked_fill(~visible, float("-inf"))
    return torch.nn.functional.scaled_dot_product_attention(q, k.repeat_interleave(G, 1), v.repeat_interleave(G, 1),
                                                            attn_mask=bias, scale=scale).transpose(1, 2)


def test_direct_calls_windows_one_and_two_sided():
    """sliding_window is one-sided when causal (i - j < w) and two-sided otherwise (|i - j| < w)."""
    module, q, k, v = call_kwargs()
    i, j = torch.arange(10).view(10, 1), torch.arange(10).view(1, 10)
    scale = 8 ** -0.5
    for causal, visible in ((True, (j <= i) & (i - j < 3)), (False, (i - j).abs() < 3)):
        out, _ = drope.transformers.attention_forward(module, q, k, v, None, sliding_window=3, is_causal=causal)
        torch.testing.assert_close(out, eager_reference(q, k, v, visible, scale))


def test_more_queries_than_keys_with_a_window_is_refused():
    """Without a mask, which of S < T keys a windowed query sees is not defined: refused rather than the window
    dropped. A causal call without a window runs SDPA's top-left alignment on every route (a soft-cap that changes
    nothing gives the same output through the model's eager function)."""
    module, q, k, v = call_kwargs(T=6, S=3)
    with pytest.raises(ValueError, match="sliding_window=1 with more queries"):
        drope.transformers.attention_forward(module, q, k, v, None, sliding_window=1)
    i, j = torch.arange(6).view(6, 1), torch.arange(3).view(1, 3)
    out, _ = drope.transformers.attention_forward(module, q, k, v, None, is_causal=True)
    visible = j <= i
    torch.testing.assert_close(out, eager_reference(q, k, v, visible, 8 ** -0.5))
    import transformers.models.gemma2.modeling_gemma2 as gemma2

    gemma_like = type("Gemma2Attention", (torch.nn.Module,), {"__module__": gemma2.__name__})()
    gemma_like.num_key_value_groups, gemma_like.is_causal, gemma_like.training = 2, True, False
    capped, _ = drope.transformers.attention_forward(gemma_like, q, k, v, None, is_causal=True, softcap=1e9)
    torch.testing.assert_close(capped, out, rtol=1e-5, atol=1e-5)


def test_each_row_counts_its_largest_position():
    """beta per row from its largest position + 1: right padding (filled with 1, as transformers fills it) counts the
    real tokens, not the last column; rows that agree fold beta into the op's float scale, bit for bit the call
    without positions (no bf16 rounding of a scaled query)."""
    module, q, k, v = call_kwargs(T=40, S=40)
    c, C = 0.4, 16
    module.config = type("Config", (), {"drope_softmax_temperature": c, "max_position_embeddings": C})()
    pos = torch.stack([torch.arange(40), torch.cat([torch.arange(30), torch.ones(10, dtype=torch.long)])])
    out, _ = drope.transformers.attention_forward(module, q, k, v, None, position_ids=pos)
    visible = torch.arange(40).view(1, 40) <= torch.arange(40).view(40, 1)
    for row, L in ((0, 40), (1, 30)):
        ref = eager_reference(q[row:row + 1], k[row:row + 1], v[row:row + 1], visible,
                              8 ** -0.5 * (1 + c * math.log(L / C)))
        torch.testing.assert_close(out[row:row + 1], ref, rtol=1e-5, atol=1e-5)
    qb, kb, vb = q.bfloat16(), k.bfloat16(), v.bfloat16()
    same = torch.arange(40).view(1, 40)
    a, _ = drope.transformers.attention_forward(module, qb, kb, vb, None, position_ids=same)
    b, _ = drope.transformers.attention_forward(module, qb, kb, vb, None)
    assert torch.equal(a, b)


def temperature_module(c=0.4, C=16):
    module, q, k, v = call_kwargs(T=1, S=40)
    module.config = type("Config", (), {"drope_softmax_temperature": c, "max_position_embeddings": C})()
    return module, q, k, v


def two_layer_forward(module, q, k, v, pos):
    """The attention calls of a forward of two layers (module.layer_idx 0, then 1) with the same positions."""
    outs = []
    for layer in (0, 1):
        module.layer_idx = layer
        outs.append(drope.transformers.attention_forward(module, q, k, v, None, position_ids=pos)[0])
    return outs


def test_positions_changed_in_place_count_in_the_next_forward():
    """Positions changed where the version counter does not see it (numpy shared memory, .data) between forwards
    give the next forward their new beta, not the last forward's."""
    module, q, k, v = temperature_module()
    buffer = np.array([[19]])
    pos = torch.from_numpy(buffer)
    first = two_layer_forward(module, q, k, v, pos)
    buffer[0, 0] = 39
    second = two_layer_forward(module, q, k, v, pos)
    for L, out in ((20, first[1]), (40, second[0]), (40, second[1])):
        ref = eager_reference(q, k, v, torch.ones(1, 40, dtype=torch.bool), 8 ** -0.5 * (1 + 0.4 * math.log(L / 16)))
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_lengths_are_read_once_per_forward(monkeypatch):
    """The layers of a forward (module.layer_idx rising) share one read of the lengths (a device sync on a GPU)."""
    module, q, k, v = temperature_module()
    reads = []
    lengths = drope.transformers._lengths
    monkeypatch.setattr(drope.transformers, "_lengths", lambda *a: reads.append(1) or lengths(*a))
    pos = torch.tensor([[19]])
    two_layer_forward(module, q, k, v, pos)
    assert len(reads) == 1
    two_layer_forward(module, q, k, v, pos)
    assert len(reads) == 2


def test_dropout_runs_sdpa_with_the_same_generator():
    module, q, k, v = call_kwargs()
    torch.manual_seed(5)
    out, _ = drope.transformers.attention_forward(module, q, k, v, None, dropout=0.5, is_causal=True)
    torch.manual_seed(5)
    ref, _ = sdpa_attention_forward(module, q, k, v, None, dropout=0.5, is_causal=True)
    torch.testing.assert_close(out, ref)
    assert not torch.allclose(out, drope.transformers.attention_forward(module, q, k, v, None, is_causal=True)[0])


def test_unknown_keyword_arguments_are_not_ignored():
    """A keyword argument drope does not know goes to the model's eager function (which takes it or refuses it)."""
    module, q, k, v = call_kwargs()
    with pytest.raises(ValueError, match="head_mask need the eager attention function"):
        drope.transformers.attention_forward(module, q, k, v, None, head_mask=torch.ones(4))
    out, _ = drope.transformers.attention_forward(module, q, k, v, None, position_ids=torch.arange(10)[None],
                                                  output_attentions=False, cu_seq_lens_q=None)
    torch.testing.assert_close(out, drope.transformers.attention_forward(module, q, k, v, None)[0])


@pytest.mark.parametrize("kwargs, words", [
    (dict(is_causal="yes"), "is_causal must be None, True or False"),
    (dict(sliding_window=0), "sliding_window must be None or an int >= 1"),
    (dict(sliding_window=2.5), "sliding_window must be None or an int >= 1"),
    (dict(scaling="0.3"), "scaling must be None or a finite number > 0"),
    (dict(scaling=-1.0), "scaling must be None"),
    (dict(dropout="0.1"), "dropout must be a number in [0, 1)"),
    (dict(dropout=1.0), "dropout must be a number in [0, 1)"),
])
def test_bad_transformers_arguments_are_named(kwargs, words):
    module, q, k, v = call_kwargs()
    with pytest.raises(ValueError) as e:
        drope.transformers.attention_forward(module, q, k, v, None, **kwargs)
    assert words in str(e.value)


@pytest.mark.parametrize("c, error, words", [
    (-0.1, ValueError, "drope_softmax_temperature must be a finite number >= 0"),
    (float("nan"), ValueError, "drope_softmax_temperature must be a finite number >= 0"),
    ("0.1", TypeError, "drope_softmax_temperature must be a number"),
    (True, TypeError, "drope_softmax_temperature must be a number"),
])
def test_bad_softmax_temperature_is_refused(c, error, words):
    _, ours = pair("smollm3_drope", drope_softmax_temperature=c)
    with pytest.raises(error) as e:
        ours(tokens(batch=1, seq=20))
    assert words in str(e.value)
    for off in (None, 0, 0.0):
        assert drope.transformers.softmax_temperature(type("C", (), {"drope_softmax_temperature": off,
                                                                      "max_position_embeddings": 4})(), 64) == 1.0


@pytest.mark.parametrize("C", [None, 0, -8, "16", float("nan")])
def test_temperature_without_a_training_length_is_refused(C):
    """A temperature c > 0 is defined by C = config.max_position_embeddings: without a positive one it is refused
    naming it (not beta = 1 in silence, nor a bare math error); with c off, C is not needed."""
    module, q, k, v = call_kwargs()
    module.config = type("Config", (), {"drope_softmax_temperature": 0.4, "max_position_embeddings": C})()
    with pytest.raises(ValueError, match=r"needs config\.max_position_embeddings"):
        drope.transformers.softmax_temperature(module.config, 100)
    with pytest.raises(ValueError, match=r"needs config\.max_position_embeddings"):
        drope.transformers.attention_forward(module, q, k, v, None)
    module.config.drope_softmax_temperature = 0
    assert drope.transformers.softmax_temperature(module.config, 100) == 1.0
    drope.transformers.attention_forward(module, q, k, v, None)


@pytest.mark.parametrize("name", ["qwen2_moe_sliding", "phimoe_sliding", "llama4_chunked"])
def test_local_attention_carried_by_the_mask_matches_sdpa(name):
    """A sliding window or attention chunks that only the mask carries (the attention function gets no
    `sliding_window`) are applied, not dropped for a plain causal mask: logits and gradients equal "sdpa"'s."""
    sdpa, ours = pair(name)
    ids = tokens(seq=24)
    assert_same(logits_and_grads(ours, ids), logits_and_grads(sdpa, ids))


def test_sliding_window_masks_still_run_the_op(monkeypatch):
    """A sliding-window mask that is exactly the op's pattern runs the op, whether or not the module passes its
    window (Qwen2-MoE does not, Qwen2 does): no call falls back to transformers' functions."""
    monkeypatch.setattr(drope.transformers, "_route", lambda *a, **k: pytest.fail("fell back to transformers"))
    for name in ("qwen2_moe_sliding", "qwen2_sliding"):
        _, ours = pair(name)
        ids = tokens(seq=24)
        with torch.no_grad():
            ours(ids)
            ours(ids, attention_mask=torch.ones_like(ids))  # no padding: still the op's pattern


def test_output_attentions_returns_eager_weights():
    """output_attentions=True returns every layer's attention weights (as "eager"), not a tuple of None."""
    eager, ours = pair("llama", reference="eager")
    ids = tokens(seq=12)
    with torch.no_grad():
        a, b = (m(ids, output_attentions=True) for m in (eager, ours))
    assert len(b.attentions) == BASE["num_hidden_layers"] and all(w is not None for w in b.attentions)
    for wa, wb in zip(a.attentions, b.attentions):
        torch.testing.assert_close(wb, wa, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b.logits, a.logits, rtol=1e-5, atol=1e-5)


def test_output_attentions_in_a_static_cache_prefill_cover_every_slot():
    """The prefill of an empty static cache with output_attentions=True returns weights over every slot of the cache
    (the empty ones 0), as "eager" does."""
    eager, ours = (m.eval() for m in pair("llama", reference="eager"))
    ids = tokens(batch=1, seq=6)
    with torch.no_grad():
        a, b = (m(ids, past_key_values=StaticCache(config=m.config, max_cache_len=16), use_cache=True,
                  output_attentions=True) for m in (eager, ours))
    for wa, wb in zip(a.attentions, b.attentions):
        assert wb.shape == wa.shape == (1, 4, 6, 16)
        torch.testing.assert_close(wb, wa, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b.logits, a.logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reference", ["sdpa", "eager"])
def test_a_window_beside_a_plain_causal_mask_follows_the_mask(reference):
    """OLMoE passes config.sliding_window to attention and builds a plain causal mask: as for "sdpa" and "eager",
    the mask decides and nothing slides (a direct call without a model still applies the window: above)."""
    ref, ours = pair("olmoe_window", reference=reference)
    ids = tokens(seq=20)
    assert_same(logits_and_grads(ours, ids), logits_and_grads(ref, ids))


def bart(impl, enc_len, dec_len):
    torch.manual_seed(0)
    cfg = BartConfig(vocab_size=97, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                     decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64,
                     attn_implementation=impl)
    model = BartForConditionalGeneration(cfg)
    model.zero_grad()
    out = model(input_ids=tokens(seq=enc_len), decoder_input_ids=tokens(seq=dec_len, seed=3))
    (out.logits * torch.linspace(-1, 1, 97)).sum().backward()
    return out.logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("enc_len, dec_len", [(12, 6), (6, 12)])
def test_cross_attention_matches_sdpa(enc_len, dec_len):
    """Encoder-decoder cross-attention, with fewer or more decoder queries than encoder keys, equals "sdpa"."""
    assert_same(bart("drope", enc_len, dec_len), bart("sdpa", enc_len, dec_len))


def test_value_head_dim_other_than_the_query_s_matches_sdpa():
    """DeepSeek-V3's multi-head latent attention (v's head dim 8, q's and k's 24) runs, equal to "sdpa"."""
    sdpa, ours = pair("deepseek_v3")
    ids = tokens(seq=24)
    assert_same(logits_and_grads(ours, ids), logits_and_grads(sdpa, ids))


def t5_static_prefill_and_decode(impl):
    """A T5 decoder (relative position bias: transformers' position_bias) through a static cache without an attention
    mask: a prefill of 4 tokens into 12 slots (no mask, more keys than queries), then two decoding steps."""
    torch.manual_seed(0)
    cfg = T5Config(vocab_size=97, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_heads=4, decoder_start_token_id=0,
                   pad_token_id=0, eos_token_id=1, attn_implementation=impl)
    model = T5ForConditionalGeneration(cfg).eval()
    ids, dec = tokens(seq=10), tokens(seq=6, seed=3)
    with torch.no_grad():
        enc = model.get_encoder()(input_ids=ids)
        cache = EncoderDecoderCache(*(StaticCache(config=cfg, max_cache_len=12) for _ in range(2)))
        logits = []
        for start, end in ((0, 4), (4, 5), (5, 6)):
            logits.append(model(encoder_outputs=enc, decoder_input_ids=dec[:, start:end], past_key_values=cache,
                                use_cache=True, cache_position=torch.arange(start, end)).logits)
    return torch.cat(logits, 1)


def test_position_bias_with_a_static_cache_matches_sdpa():
    """The prefill of an empty static cache attends to its first T slots only; the position bias (T5) is cut to those
    keys with them, as transformers' SDPA function cuts it."""
    torch.testing.assert_close(t5_static_prefill_and_decode("drope"), t5_static_prefill_and_decode("sdpa"))


@pytest.mark.parametrize("q_batch, kv_batch", [(1, 3), (3, 1)])
@pytest.mark.parametrize("is_causal", [True, False])
def test_batch_of_one_broadcasts_as_in_sdpa(q_batch, kv_batch, is_causal):
    """SDPA broadcasts a batch of 1 (learned queries shared by a batch, or one key/value set for many queries): the
    same here, forward and gradients."""
    module = torch.nn.Module()
    module.is_causal, module.num_key_value_groups = is_causal, 2
    g = torch.Generator().manual_seed(0)
    q = torch.randn(q_batch, 4, 5, 16, generator=g)
    k, v = (torch.randn(kv_batch, 2, 7, 16, generator=g) for _ in "kv")
    results = []
    for fn in (drope.transformers.attention_forward, sdpa_attention_forward):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out, _ = fn(module, *leaves, None, is_causal=is_causal)
        (out * torch.linspace(-1, 1, 16)).sum().backward()
        results.append((out.detach(), [t.grad for t in leaves]))
    (out, grads), (ref, ref_grads) = results
    assert out.shape == ref.shape == (3, 5, 4, 16)
    torch.testing.assert_close(out, ref)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b)
