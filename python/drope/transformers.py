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
beta = 1 + c * ln(L / C) when the L tokens in context exceed C = ``config.max_position_embeddings``. L is counted as
drope's own model counts it, one L for all the queries of a sequence in a forward: the largest ``position_ids`` + 1
of the query's sequence (what ``generate`` passes, padding excluded; a packed row holds one sequence from each
position 0 to the next), else the last ``cache_position`` + 1; a row whose queries are its whole context (a forward
without a cache, or the first fill of one) counts no more than the keys its mask lets them see, so padding does not
count even without ``position_ids``; without positions, the keys the row's mask lets it see, else the keys the layer
sees. Never the slots of a static cache or the window of a sliding cache.
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
# The attn_implementation names register() gave drope's functions.
_NAMES = set()


def _coefficient(config):
    """c = config.drope_softmax_temperature, checked: 0.0 when off (None or 0)."""
    c = getattr(config, "drope_softmax_temperature", None)
    if c is None:
        return 0.0
    if isinstance(c, bool) or not isinstance(c, (numbers.Real, torch.SymFloat)):
        raise TypeError(f"drope attention: config.drope_softmax_temperature must be a number (c >= 0; 0 or None: off), "
                        f"got {c!r}")
    if not (c >= 0 and c < _FLOAT_MAX):  # comparisons trace under torch.compile(dynamic=True); NaN fails both
        raise ValueError(f"drope attention: config.drope_softmax_temperature must be a finite number >= 0 (0 or None: "
                         f"off), got {c}")
    return c


def _train_length(config, c):
    """C = config.max_position_embeddings, checked: a temperature c > 0 is defined by it."""
    C = getattr(config, "max_position_embeddings", None)
    if isinstance(C, bool) or not isinstance(C, (numbers.Real, torch.SymInt, torch.SymFloat)) or not (
            C > 0 and C < _FLOAT_MAX):
        raise ValueError(f"drope attention: config.drope_softmax_temperature = {c} needs "
                         f"config.max_position_embeddings (the training length C of beta = 1 + c ln(L / C)) as a "
                         f"finite number > 0, got {C!r}")
    return C


def softmax_temperature(config, length):
    """beta for `length` positions: 1 + c * ln(length / C) beyond C, else 1 (c = config.drope_softmax_temperature:
    None or 0 is off; a negative, non-finite or non-numeric c is refused naming it, and so is a c > 0 without a
    positive config.max_position_embeddings)."""
    c = _coefficient(config)
    if c == 0:
        return 1.0
    train_length = _train_length(config, c)
    if length <= train_length:
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


def _sequence_lengths(pos):
    """(B or 1, T) int64: for each query, the largest position + 1 of its sequence. A sequence starts at each position
    0 (packed rows, as transformers' FlashAttention path splits them), so right padding (positions of 1) counts with
    the sequence before it and a left-padded row's own tokens start after the padding."""
    seq = (pos == 0).cumsum(-1)  # the sequence of each query: 0 before the row's first 0, then one more at each 0
    largest = torch.zeros(pos.shape[0], pos.shape[1] + 1, dtype=pos.dtype, device=pos.device)
    largest = largest.scatter_reduce(-1, seq, pos, "amax", include_self=False)
    return largest.gather(-1, seq).long() + 1


def _readable_mask(mask):
    """Whether _visible_keys reads `mask`: 4-D, bool (True: visible) or additive (above the dtype's lowest / 2)."""
    return isinstance(mask, torch.Tensor) and mask.dim() == 4 and (mask.dtype == torch.bool or mask.is_floating_point())


def _visible_keys(mask):
    """(B or 1,) int64: the keys that some query of each row may see; None for a mask _readable_mask refuses."""
    if not _readable_mask(mask):
        return None
    seen = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    return seen.any(-2).any(1).sum(-1)


def _lengths(pos, visible, T):
    """(B or 1, T or 1) int64: L of each query, from its sequence's positions and its row's visible keys (either may
    be None, not both)."""
    if pos is None:
        return visible.view(-1, 1)
    lengths = _sequence_lengths(pos)
    if visible is None:
        return lengths
    # Queries that together see no more keys than there are of them are the row's whole context (a forward without a
    # cache, the first fill of one): what they see bounds L, which positions made from cache_position (no
    # position_ids) overcount by the padding. Later (decoding, chunked prefill) a sliding window or an attention chunk
    # hides tokens that count, and the positions alone are right.
    visible = visible.view(-1, 1)
    return torch.where(visible <= T, torch.minimum(lengths, visible), lengths)


# The temperatures of the current forward: every layer passes the same position and mask tensors, so the lengths are
# read to the host (a device sync on a GPU) once per forward, not once per layer. A forward is a run of calls whose
# module.layer_idx rises; a call that does not raise it (the next forward's first layer, a module without layer_idx)
# starts afresh, so a tensor changed in place between forwards (through numpy, .data) is read again.
_FORWARD = {"layer": None, "entries": []}


def _forward_cached(module, tensors, extra, compute):
    layer = getattr(module, "layer_idx", None)
    last = _FORWARD["layer"]
    if not isinstance(layer, int) or isinstance(layer, bool) or last is None or layer <= last:
        _FORWARD["entries"] = []
    _FORWARD["layer"] = layer if isinstance(layer, int) and not isinstance(layer, bool) else None
    for refs, seen_extra, value in _FORWARD["entries"]:
        if seen_extra == extra and all((r is None and t is None) or (r is not None and r() is t)
                                       for r, t in zip(refs, tensors)):
            return value
    value = compute()
    _FORWARD["entries"].append(([None if t is None else weakref.ref(t) for t in tensors], extra, value))
    return value


def _beta_tensor(c, train_length, lengths, query):
    """beta of each query as a (B or 1, 1, T or 1, 1) tensor in query's dtype, from (B or 1, T or 1) lengths."""
    ratio = lengths.to(torch.float64) / train_length
    beta = torch.where(ratio > 1, 1.0 + c * torch.log(ratio.clamp(min=1.0)), torch.ones_like(ratio))
    return beta.to(device=query.device, dtype=query.dtype).view(lengths.shape[0], 1, lengths.shape[1], 1)


def _temperature(module, kwargs, mask, keys, query):
    """beta of this call: a float when every query has the same (the op and SDPA apply it in float32, as they apply
    the scale), else a (B or 1, 1, T or 1, 1) tensor in query's dtype that scales each query. L as the module
    docstring says: positions by sequence, bounded by the visible keys of a row whose queries are its whole context;
    without positions the mask's visible keys; else `keys`, the keys the layer sees. Under torch.compile the lengths
    stay on the device (no host read), and beta is always the tensor."""
    config = getattr(module, "config", None)
    c = _coefficient(config)
    if c == 0:
        return 1.0
    train_length = _train_length(config, c)
    pos = _positions(kwargs)
    if pos is None and not _readable_mask(mask):
        return softmax_temperature(config, keys)
    T = query.shape[2]
    if torch.compiler.is_compiling():
        return _beta_tensor(c, train_length, _lengths(pos, _visible_keys(mask), T), query)

    def compute():
        lengths = _lengths(pos, _visible_keys(mask), T)
        lowest, highest = (max(L, train_length) for L in torch.stack([lengths.amin(), lengths.amax()]).tolist())
        if lowest == highest:  # one beta (1 at or below C): a float, as without positions
            return softmax_temperature(config, highest)
        return _beta_tensor(c, train_length, lengths, query)

    # Keyed on the tensors the model passes (cache_position's (1, T) view is new at each call).
    sources = tuple(t if isinstance(t, torch.Tensor) else None
                    for t in (kwargs.get("position_ids"), kwargs.get("cache_position"), mask))
    return _forward_cached(module, sources, (T, c, train_length, query.dtype, query.device), compute)


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
    """(1, 1, T, S) bool, True where a key is visible: the pattern a call without a mask tensor stands for.
    transformers' sliding_window is one-sided when causal (i - j < w) and two-sided otherwise (|i - j| < w,
    ModernBERT's local layers, as its flash-attention path reads it). None: every key visible."""
    T, S = query.shape[2], key.shape[2]
    if not is_causal and not sliding_window:
        return None
    # Causal: one query ends the keys (decoding); more start at key 0: the prefill of an empty static cache, and more
    # queries than keys (SDPA's top-left alignment, query i sees keys 0..i), as the SDPA route computes both.
    causal_start = S - 1 if T == 1 else 0
    start = causal_start if is_causal else max(S - T, 0)
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


def _in_model(module):
    """Whether `module` belongs to a model whose attn_implementation is one register() made, so that its masks come
    from _mask."""
    return getattr(getattr(module, "config", None), "_attn_implementation", None) in _NAMES


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
    routed = _routed(kwargs)
    if attention_mask is None and _in_model(module):
        # The model built its mask through _mask, whose None is a pattern without a window: the mask decides, as it
        # does for "sdpa" and "eager", whatever sliding_window the layer passes beside it (OLMoE passes its config's).
        sliding_window = None
    tagged = _tagged_window(attention_mask, T, S)
    if tagged is not None and not (dropout or routed):
        # The mask is exactly causal with a window of `tagged` keys (what "sdpa" applies, whatever sliding_window this
        # module passes, if any): the op applies that pattern itself.
        attention_mask, is_causal, sliding_window = None, True, tagged
    # No mask with more keys than queries: the prefill of an empty static cache, whose queries see its first T slots
    # (transformers' SDPA does the same).
    prefill = attention_mask is None and is_causal and 1 < T < S
    if prefill and not routed - SDPA_KWARGS:
        # Every route but the eager function's attends to those keys alone (a position bias (T5) is cut with them);
        # the eager function gets them all and a mask of the first T, so that its weights have every slot, as for
        # "eager".
        key, value = key[:, :, :T], value[:, :, :T]
        if kwargs.get("position_bias") is not None:
            kwargs["position_bias"] = kwargs["position_bias"][..., :T]
        S = T
    temperature = _temperature(module, kwargs, attention_mask, T if prefill else S, query)
    if isinstance(temperature, torch.Tensor):  # queries of different lengths: beta scales each query
        query, temperature = query * temperature, 1.0
    if attention_mask is None and T > S:
        # More queries than keys (cross-attention to a shorter sequence): transformers' SDPA function, as "sdpa" runs it
        # (the op's queries are the last T of S positions).
        if sliding_window:
            raise ValueError(f"drope attention: sliding_window={sliding_window} with more queries ({T}) than keys "
                             f"({S}) and no mask: which keys a query sees is not defined; pass the mask")
        return _route(module, query, key, value, None, dropout, scaling, temperature, None, is_causal, routed, **kwargs)
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
    _NAMES.add(name)
    return name
