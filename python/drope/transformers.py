"""drope's attention as an attention implementation of HF transformers.

    import drope.transformers
    drope.transformers.register()
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="drope")

``attention_forward`` takes transformers' arguments: query (B, H, T, D), key/value (B, H_kv, S, D) without repeating
the key/value heads, ``scaling``, ``sliding_window`` and ``is_causal``. ``register`` also registers the mask
function, so that a causal or sliding-window mask is not materialised (the op applies both itself, as
FlashAttention does); a mask that is more than that (padding, packed sequences, a static cache while decoding,
chunked prefill) reaches the attention function and runs through transformers' SDPA function with the same scale
and temperature.

A DroPE'd model (NoPE layers, e.g. SmolLM3 with ``no_rope_layers`` all 0) gets drope's long-context softmax
temperature from its config: ``config.drope_softmax_temperature = c`` multiplies the logits by
beta = 1 + c * ln(S / C) when the S keys a layer sees exceed C = ``config.max_position_embeddings``.
"""

import math

from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ._ops import attention

__all__ = ["attention_forward", "register", "softmax_temperature"]


def softmax_temperature(config, length):
    """beta for `length` positions: 1 + c * ln(length / C) beyond C, else 1 (c = config.drope_softmax_temperature)."""
    c = getattr(config, "drope_softmax_temperature", None) or 0.0
    train_length = getattr(config, "max_position_embeddings", None)
    if c <= 0 or not train_length or length <= train_length:
        return 1.0
    return 1.0 + c * math.log(length / train_length)


def _sdpa_with_mask(module, query, key, value, attention_mask, scaling, temperature, is_causal, **kwargs):
    base = scaling if scaling is not None else query.shape[-1] ** -0.5
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, scaling=base * temperature, is_causal=is_causal, **kwargs
    )


def attention_forward(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None, is_causal=None, **kwargs
):
    """transformers' attention interface: returns (attn_output (B, T, H, D), None)."""
    if dropout:
        raise ValueError("drope attention has no dropout: set the config's attention_dropout to 0 or call model.eval()")
    if kwargs.get("softcap") is not None or kwargs.get("position_bias") is not None:
        raise ValueError("drope attention takes no logit soft-capping or position bias; use attn_implementation='sdpa'")
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    T, S = query.shape[2], key.shape[2]
    temperature = softmax_temperature(getattr(module, "config", None), S)
    if attention_mask is not None or kwargs.get("cache") is not None:
        return _sdpa_with_mask(module, query, key, value, attention_mask, scaling, temperature, is_causal, **kwargs)
    if is_causal and 1 < T < S:
        # No mask with more keys than queries: the prefill of an empty static cache (transformers' SDPA does the same).
        key, value = key[:, :, :T], value[:, :, :T]
    out = attention(query, key, value, causal=is_causal, window=sliding_window or 0, scale=scaling,
                    temperature=temperature)
    return out.transpose(1, 2).contiguous(), None


def _mask(*, q_length, kv_length, q_offset=0, attention_mask=None, allow_is_causal_skip=True, local_size=None, **kw):
    """transformers' SDPA mask, except where the op masks by itself: None for a causal or sliding-window pattern
    without padding whose queries end the keys (while compiling too, where transformers' own test keeps the mask)."""
    plain = allow_is_causal_skip and attention_mask is None and isinstance(q_offset, int)
    if plain and (q_length == 1 or q_length == kv_length):
        return None
    return sdpa_mask(q_length=q_length, kv_length=kv_length, q_offset=q_offset, attention_mask=attention_mask,
                     allow_is_causal_skip=allow_is_causal_skip, **kw)


def register(name="drope"):
    """Makes `name` an attn_implementation of transformers (attention and mask functions); returns the name."""
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, _mask)
    return name
