"""drope's attention as an attention implementation of HF transformers.

    import drope.transformers
    drope.transformers.register()
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="drope")

``attention_forward`` takes transformers' arguments: query (B, H, T, D), key/value (B, H_kv, S, D) without repeating
the key/value heads, ``scaling``, ``sliding_window`` and ``is_causal``; a call the op does not compute exactly
(dropout, a two-sided window, attention sinks, soft-capping, a position bias, attention weights, more queries than
keys, ...) runs through transformers' own function for it (SDPA's, or the model's eager one) with the same scale and
temperature. ``register`` also registers the mask function, so that a plain causal mask is not materialised (the op
applies it itself, as FlashAttention does) and a sliding-window mask that is exactly the op's pattern is marked with
its window, which the op then applies; a mask that is more than that (padding, packed sequences, attention chunks, a
static cache while decoding, chunked prefill) reaches the attention function and runs through transformers' SDPA
function with the same scale and temperature.

A DroPE'd model (NoPE layers, e.g. SmolLM3 with ``no_rope_layers`` all 0) gets drope's long-context softmax
temperature from its config: ``config.drope_softmax_temperature = c`` multiplies the logits by
beta = 1 + c * ln(L / C) when the L tokens so far exceed C = ``config.max_position_embeddings``. L is counted per
row, as drope's own model counts it: the largest ``position_ids`` + 1 (what ``generate`` passes, padding
excluded), else the last ``cache_position`` + 1, else the keys the layer sees; never the slots of a static cache
or the window of a sliding cache.
"""

import math
import numbers
import sys
import weakref

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, causal_mask_function, sdpa_mask

from ._ops import attention

__all__ = ["attention_forward", "register", "softmax_temperature"]

# Keyword arguments transformers passes to attention functions that do not change what attention computes (the
# mask carries packed sequences for SDPA-style functions, as for "sdpa"; the rest is bookkeeping or flash-kernel
# options; position_ids and cache_position only count the tokens for the temperature). Every other keyword argument
# with a value (attention sinks `s_aux`, `softcap`, `position_bias`, a paged
# `cache`, ...) sends the call to transformers' own function for it (_route).
INERT_KWARGS = frozenset({
    "position_ids", "cache_position", "use_cache", "output_hidden_states",
    "output_router_logits", "num_items_in_batch", "past_key_values", "past_key_value", "position_embeddings",
    "layer_idx", "deterministic", "cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx",
    "return_dict",
})
# Handled by transformers' SDPA function exactly as attn_implementation="sdpa" does; anything else needs the model's
# own eager function (the reference of every model, e.g. gpt-oss's sinks, Gemma 2's soft-capping, the attention
# weights of output_attentions=True).
SDPA_KWARGS = frozenset({"position_bias", "cache"})
# The attribute by which _mask marks a mask tensor that is exactly a sliding-window causal pattern whose queries end
# the keys: its value is the window, which the op applies by itself.
WINDOW_TAG = "_drope_window"
_FLOAT_MAX = sys.float_info.max  # `x < math.inf` holds for an int too large for a double


def softmax_temperature(config, length):
    """beta for `length` positions: 1 + c * ln(length / C) beyond C, else 1 (c = config.drope_softmax_temperature:
    None or 0 is off; a negative, non-finite or non-numeric c is refused naming it)."""
    c = getattr(config, "drope_softmax_temperature", None)
    if c is None:
        return 1.0
    if isinstance(c, bool) or not isinstance(c, (numbers.Real, torch.SymFloat)):
        raise TypeError(f"drope attention: config.drope_softmax_temperature must be a number (c >= 0; 0 or None: off), "
                        f"got {c!r}")
    if not (c >= 0 and c < _FLOAT_MAX):  # comparisons trace under torch.compile(dynamic=True); NaN fails both
        raise ValueError(f"drope attention: config.drope_softmax_temperature must be a finite number >= 0 (0 or None: "
                         f"off), got {c}")
    train_length = getattr(config, "max_position_embeddings", None)
    if c == 0 or not train_length or length <= train_length:
        return 1.0
    return 1.0 + c * math.log(length / train_length)


def _positions(kwargs):
    """The positions a call carries, or None: position_ids (B or 1, T) as text models pass them, else cache_position
    (T,) as a (1, T) tensor."""
    pos = kwargs.get("position_ids")
    if isinstance(pos, torch.Tensor) and pos.dim() == 2 and pos.shape[-1] > 0 and not pos.is_floating_point():
        return pos
    cache = kwargs.get("cache_position")
    if isinstance(cache, torch.Tensor) and cache.dim() == 1 and cache.shape[0] > 0 and not cache.is_floating_point():
        return cache.view(1, -1)
    return None


# The last positions read on the host, and the lengths they gave: every layer of a forward passes the same tensor,
# so the host copy (a device sync on a GPU) is made once per forward, not once per layer.
_HOST_LENGTHS = [None, -1, None]


def _host_lengths(pos):
    try:
        version = pos._version
    except RuntimeError:  # an inference-mode tensor has no version counter: read it each time
        return (pos.amax(-1) + 1).tolist()
    ref, seen, lengths = _HOST_LENGTHS
    if ref is not None and ref() is pos and seen == version:
        return lengths
    lengths = (pos.amax(-1) + 1).tolist()
    _HOST_LENGTHS[:] = [weakref.ref(pos), version, lengths]
    return lengths


def _temperature(config, kwargs, keys, query):
    """beta of this call: a float when every row has the same (the op and SDPA apply it in float32, as they apply the
    scale), else a (B, 1, 1, 1) tensor in query's dtype that scales each row's queries. Each row counts its tokens so
    far, L = its largest position + 1 (generate's position_ids leave padding out; right padding and packed rows
    count their longest run), else the keys the layer sees. Under torch.compile the lengths stay on the device (no
    host read), and beta is always the tensor."""
    softmax_temperature(config, 1)  # refuses a bad c; one token never exceeds C
    c = getattr(config, "drope_softmax_temperature", None)
    train_length = getattr(config, "max_position_embeddings", None)
    pos = _positions(kwargs)
    if not c or not train_length or pos is None:
        return softmax_temperature(config, keys)
    if not torch.compiler.is_compiling():
        betas = {softmax_temperature(config, L) for L in _host_lengths(pos)}
        if len(betas) == 1:
            return betas.pop()
    ratio = (pos.amax(-1) + 1).to(torch.float64) / train_length
    beta = torch.where(ratio > 1, 1.0 + c * torch.log(ratio.clamp(min=1.0)), torch.ones_like(ratio))
    return beta.to(device=query.device, dtype=query.dtype).view(-1, 1, 1, 1)


def _check_options(dropout, scaling, sliding_window, is_causal):
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0 <= dropout < 1:
        raise ValueError(f"drope attention: dropout must be a number in [0, 1), got {dropout!r}")
    if scaling is not None and (isinstance(scaling, bool) or not isinstance(scaling, numbers.Real)
                                or not (scaling > 0 and scaling < _FLOAT_MAX)):
        raise ValueError(f"drope attention: scaling must be None or a finite number > 0, got {scaling!r}")
    if sliding_window is not None and (isinstance(sliding_window, bool) or not isinstance(sliding_window, int)
                                       or sliding_window < 1):
        raise ValueError(f"drope attention: sliding_window must be None or an int >= 1, got {sliding_window!r}")
    if is_causal is not None and not isinstance(is_causal, bool):
        raise ValueError(f"drope attention: is_causal must be None, True or False, got {is_causal!r}")


def _pattern_mask(query, key, is_causal, sliding_window):
    """(1, 1, T, S) bool, True where a key is visible: the pattern a call without a mask tensor stands for (its
    queries end the keys). transformers' sliding_window is one-sided when causal (i - j < w) and two-sided otherwise
    (|i - j| < w, ModernBERT's local layers, as its flash-attention path reads it). None: every key visible. With
    more queries than keys the queries start at key 0 (SDPA's top-left alignment)."""
    T, S = query.shape[2], key.shape[2]
    if not is_causal and not sliding_window:
        return None
    # More queries than keys: SDPA's top-left alignment (query i sees keys 0..i), as the SDPA route computes it.
    start = S - T if T <= S else 0
    i = torch.arange(start, start + T, device=query.device).view(T, 1)
    j = torch.arange(S, device=query.device).view(1, S)
    if is_causal:
        visible = j <= i
        if sliding_window:
            visible = visible & (j > i - sliding_window)
    else:
        visible = (i - j).abs() < sliding_window
    return visible.view(1, 1, T, S)


def _eager_function(module, names):
    fn = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if fn is None:
        raise ValueError(f"drope attention: {', '.join(names)} need the eager attention function of "
                         f"{type(module).__module__}, which has none; use attn_implementation='eager'")
    return fn


def _route(module, query, key, value, attention_mask, dropout, scaling, temperature, sliding_window, is_causal,
           routed, **kwargs):
    """A call the op does not compute exactly, through transformers' own function with drope's temperature: SDPA's
    (dropout, a mask tensor, position_bias, a paged cache), or the model's eager function (any other argument).
    The mask is the one that attn_implementation "sdpa" / "eager" would have been given."""
    base = scaling if scaling is not None else query.shape[-1] ** -0.5
    mask = attention_mask
    if mask is None and (sliding_window or routed - SDPA_KWARGS):
        mask = _pattern_mask(query, key, is_causal, sliding_window)
    if routed - SDPA_KWARGS:
        fn = _eager_function(module, sorted(routed - SDPA_KWARGS))
        if mask is not None and mask.dtype == torch.bool:  # eager functions add the mask to the logits
            mask = torch.zeros(mask.shape, dtype=query.dtype, device=query.device).masked_fill(
                ~mask, torch.finfo(query.dtype).min)
        return fn(module, query, key, value, mask, dropout=dropout, scaling=base * temperature, **kwargs)
    return sdpa_attention_forward(module, query, key, value, mask, dropout=dropout, scaling=base * temperature,
                                  is_causal=is_causal, **kwargs)


def _routed(kwargs):
    """The keyword arguments that change what attention computes: every one with a value that is not inert
    (output_attentions=False is inert; True asks for the attention weights, which only the eager function returns)."""
    return {k for k, v in kwargs.items()
            if v is not None and k not in INERT_KWARGS and not (k == "output_attentions" and v is False)}


def _tagged_window(attention_mask, T, S):
    """The window of a mask that _mask marked as a sliding-window causal pattern of this call's (T, S), else None."""
    window = getattr(attention_mask, WINDOW_TAG, None) if attention_mask is not None else None
    return window if window is not None and tuple(attention_mask.shape[-2:]) == (T, S) else None


def attention_forward(
    module, query, key, value, attention_mask, dropout=0.0, scaling=None, sliding_window=None, is_causal=None, **kwargs
):
    """transformers' attention interface: returns (attn_output (B, T, H, D), None). What the op computes exactly runs
    the op; every other call (a mask tensor, dropout, a two-sided window, sinks, soft-capping, attention weights,
    more queries than keys, a value head dim other than the query's, ...) runs through transformers' own function
    for it (_route), never with an argument dropped."""
    _check_options(dropout, scaling, sliding_window, is_causal)
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    T, S = query.shape[2], key.shape[2]
    temperature = _temperature(getattr(module, "config", None), kwargs, S, query)
    if isinstance(temperature, torch.Tensor):  # rows of different lengths: beta scales each row's queries
        query, temperature = query * temperature, 1.0
    routed = _routed(kwargs)
    tagged = _tagged_window(attention_mask, T, S)
    if tagged is not None and not (dropout or routed):
        # The mask is exactly causal with a window of `tagged` keys (what "sdpa" applies, whatever sliding_window this
        # module passes, if any): the op applies that pattern itself.
        attention_mask, is_causal, sliding_window = None, True, tagged
    if attention_mask is None and T > S:
        # More queries than keys (cross-attention to a shorter sequence): transformers' SDPA function, as "sdpa" runs it
        # (the op's queries are the last T of S positions).
        if sliding_window:
            raise ValueError(f"drope attention: sliding_window={sliding_window} with more queries ({T}) than keys "
                             f"({S}) and no mask: which keys a query sees is not defined; pass the mask")
        return _route(module, query, key, value, None, dropout, scaling, temperature, None, is_causal, routed, **kwargs)
    if attention_mask is None and is_causal and 1 < T < S:
        # No mask with more keys than queries: the prefill of an empty static cache (transformers' SDPA does the same,
        # cutting a position bias (T5) to those keys too).
        key, value = key[:, :, :T], value[:, :, :T]
        if kwargs.get("position_bias") is not None:
            kwargs["position_bias"] = kwargs["position_bias"][..., :T]
        S = T
    # A window that covers every key is no window: |i - j| and i - j are at most S - 1.
    window = sliding_window if sliding_window and sliding_window < S else None
    # The op takes v of q's head dim; multi-head latent attention (DeepSeek-V3: 192 for q and k, 128 for v) runs SDPA.
    if attention_mask is not None or dropout or routed or value.shape[-1] != query.shape[-1]:
        return _route(module, query, key, value, attention_mask, dropout, scaling, temperature, window, is_causal,
                      routed, **kwargs)
    if window and not is_causal:  # a two-sided window: the op's window is one-sided
        return _route(module, query, key, value, None, 0.0, scaling, temperature, window, False, set(), **kwargs)
    if query.shape[0] != key.shape[0]:
        # SDPA broadcasts a batch of 1 (learned queries shared by the batch, one key/value set for many queries); the op
        # reads expanded (stride-0) inputs as they are, and autograd sums the gradients of the expanded batch.
        batch = max(query.shape[0], key.shape[0])
        query, key, value = (t.expand(batch, *t.shape[1:]) if t.shape[0] == 1 else t for t in (query, key, value))
    out = attention(query, key, value, causal=is_causal, window=window or 0, scale=scaling, temperature=temperature)
    return out.transpose(1, 2).contiguous(), None


def _sliding_pattern(q_length, kv_length, window, device):
    """(T, S) bool: causal with a window of `window` keys, the queries ending the keys (what the op applies)."""
    i = torch.arange(kv_length - q_length, kv_length, device=device).view(q_length, 1)
    j = torch.arange(kv_length, device=device).view(1, kv_length)
    return (j <= i) & (j > i - window)


def _mask(*, q_length, kv_length, q_offset=0, attention_mask=None, allow_is_causal_skip=True, local_size=None,
          mask_function=causal_mask_function, **kw):
    """transformers' SDPA mask, except where the op masks by itself: None for a plain causal mask without padding whose
    queries end the keys (while compiling too, where transformers' own test keeps the mask). A mask with a local
    pattern (local_size: a sliding window or attention chunks) is materialised, as for "sdpa", since not every model
    passes its window to the attention function (Qwen2-MoE, PhiMoE) and chunks are no window (Llama 4); a mask that is
    exactly a sliding-window causal pattern (also with a padding mask of ones, as generate passes) is marked with its
    window (WINDOW_TAG), so the attention function still runs the op on it."""
    ends = allow_is_causal_skip and isinstance(q_offset, int) and (q_length == 1 or q_length == kv_length)
    if ends and attention_mask is None and local_size is None and mask_function is causal_mask_function:
        return None
    mask = sdpa_mask(q_length=q_length, kv_length=kv_length, q_offset=q_offset, attention_mask=attention_mask,
                     allow_is_causal_skip=allow_is_causal_skip, local_size=local_size, mask_function=mask_function,
                     **kw)
    if (ends and mask is not None and local_size and mask.dtype == torch.bool and mask.dim() == 4
            and not torch.compiler.is_compiling()
            and torch.equal(mask, _sliding_pattern(q_length, kv_length, local_size, mask.device).expand_as(mask))):
        setattr(mask, WINDOW_TAG, local_size)
    return mask


def register(name="drope"):
    """Makes `name` an attn_implementation of transformers (attention and mask functions); returns the name."""
    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, _mask)
    return name
