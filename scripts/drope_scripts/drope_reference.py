"""The DroPE authors' model (SakanaAI/DroPE, custom_models/drope.py and attention.py at 260a8bb) rebuilt on
transformers' own Llama / Qwen2 classes, the way their code builds it: every layer's attention replaced by a
subclass of LlamaAttention / Qwen2Attention with the identity rotation (cos = 1, sin = 0); for the QK-norm types
torch.nn.RMSNorm over the whole q / k projection before the split into heads (both norms created even when only
one is applied); `scaling` replaced by softmax_scale when the config has one.

`load(d)` is transformers loading a `--format drope-reference` directory (model_type llama_drope / qwen2_drope):
the config from its config.json, the tensors from model.safetensors with strict state-dict loading (every tensor
the authors' model has, nothing else). tests/py/test_drope_reference_format.py holds it to random-weight
reference models; the rehearsal (rehearse.py) compares its logits with ours.
"""
from __future__ import annotations

import json
import pathlib

import numpy as np
import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.models.llama import modeling_llama
from transformers.models.qwen2 import modeling_qwen2

ARCH = {"llama": (LlamaConfig, LlamaForCausalLM, modeling_llama),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM, modeling_qwen2)}
ATTENTION_TYPES = ("nope", "qk_norm_nope", "q_norm_nope", "k_norm_nope")
# config.json keys that are not constructor arguments of LlamaConfig / Qwen2Config
_NOT_CONFIG = ("model_type", "architectures", "attention_type", "softmax_scale", "transformers_version",
               "attn_implementation")


def nope_attention(base):
    """The authors' `nope(BaseAttentionClass)`: the base forward with position_embeddings = (1, 0)."""

    class NoPEAttention(base):
        def forward(self, hidden_states, position_embeddings=None, *args, **kwargs):
            cos, sin = position_embeddings
            return super().forward(hidden_states, (torch.ones_like(cos), torch.zeros_like(sin)), *args, **kwargs)

    return NoPEAttention


def qk_norm_attention(base, module, which):
    """The authors' `qk_norm(BaseAttentionClass, ...)` with their *_qk_norm_nope_attn_forward: both norms exist
    (nn.RMSNorm over H·d and H_kv·d, eps = rms_norm_eps); `which` ("qk", "q" or "k") says which are applied."""

    class QKNormAttention(base):
        def __init__(self, config, layer_idx):
            super().__init__(config, layer_idx)
            self.q_norm = nn.RMSNorm(config.num_attention_heads * self.head_dim, config.rms_norm_eps)
            self.k_norm = nn.RMSNorm(config.num_key_value_heads * self.head_dim, config.rms_norm_eps)

        def forward(self, hidden_states, position_embeddings, attention_mask, past_key_values=None, **kwargs):
            input_shape = hidden_states.shape[:-1]
            hidden_shape = (*input_shape, -1, self.head_dim)
            q = self.q_proj(hidden_states)
            k = self.k_proj(hidden_states)
            q = self.q_norm(q) if "q" in which else q
            k = self.k_norm(k) if "k" in which else k
            q = q.view(hidden_shape).transpose(1, 2)
            k = k.view(hidden_shape).transpose(1, 2)
            v = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            cos, sin = position_embeddings
            q, k = module.apply_rotary_pos_emb(q, k, torch.ones_like(cos), torch.zeros_like(sin))
            extra = {"sliding_window": getattr(self, "sliding_window", None)} if module is modeling_qwen2 else {}
            out, w = module.eager_attention_forward(self, q, k, v, attention_mask, dropout=0.0, scaling=self.scaling,
                                                    **extra, **kwargs)
            return self.o_proj(out.reshape(*input_shape, -1).contiguous()), w

    return QKNormAttention


def replace_attention(model, arch: str, attention_type: str):
    """Swaps every layer's attention of a transformers Llama / Qwen2 model for the authors' class of
    `attention_type` (the projections' weights kept, new norms at 1; `scaling` = config.softmax_scale if set)."""
    if attention_type not in ATTENTION_TYPES:
        raise ValueError(f"attention_type {attention_type!r} is not one of {', '.join(ATTENTION_TYPES)}")
    module = ARCH[arch][2]
    base = module.LlamaAttention if arch == "llama" else module.Qwen2Attention
    cls = nope_attention(base) if attention_type == "nope" else qk_norm_attention(base, module,
                                                                                     attention_type.split("_")[0])
    cfg = model.config
    for layer in model.model.layers:
        new = cls(cfg, layer.self_attn.layer_idx)
        new.load_state_dict(layer.self_attn.state_dict(), strict=False)
        if getattr(cfg, "softmax_scale", None) is not None:
            new.scaling = cfg.softmax_scale
        layer.self_attn = new
    return model


def model_from_config(arch: str, attention_type: str = "nope", softmax_scale: float | None = None, **config):
    """A DroPE{Llama,Qwen2}ForCausalLM as the authors' _create_drope_model_class builds it (fresh weights)."""
    cfg_cls, model_cls, _ = ARCH[arch]
    cfg = cfg_cls(**config, attn_implementation="eager")
    cfg.attention_type = attention_type
    if softmax_scale is not None:
        cfg.softmax_scale = softmax_scale
    return replace_attention(model_cls(cfg), arch, attention_type).eval()


def load(d: str | pathlib.Path):
    """The authors' from_pretrained on a drope-reference directory: their config keys, strict loading."""
    from safetensors.torch import load_file

    d = pathlib.Path(d)
    cfg = json.loads((d / "config.json").read_text(encoding="utf-8"))
    arch = str(cfg.get("model_type", "")).removesuffix("_drope")
    if cfg.get("model_type") != arch + "_drope" or arch not in ARCH:
        raise ValueError(f"{d / 'config.json'}: model_type {cfg.get('model_type')!r} is not llama_drope or qwen2_drope")
    config = {k: v for k, v in cfg.items() if k not in _NOT_CONFIG}
    model = model_from_config(arch, cfg.get("attention_type", "nope"), cfg.get("softmax_scale"), **config)
    state = load_file(str(d / "model.safetensors"))
    if model.config.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict(state, strict=True)
    return model.eval()


def logits(model, tokens) -> np.ndarray:
    """float32 logits (B, T, V) of a list of equally long token lists."""
    with torch.no_grad():
        return model(torch.tensor(tokens)).logits.float().numpy()


def rel_err(a, b) -> float:
    """max |a − b| / max |b|: the relative error the parity tests hold to 1e-4."""
    return float(np.abs(a - b).max() / np.abs(b).max())
