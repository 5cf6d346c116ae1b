"""The Python side of the drope:: ops: fake implementations (shapes and dtypes for torch.compile and meta tensors),
the autograd formula of attention_fwd (its backward is attention_bwd, from the saved output and log-sum-exp), and
``attention``, the entry point with Python defaults.

Every argument is checked where it enters: ``attention`` checks the Python types (a string, None or a tensor where a
number or a flag belongs) and the values; the C++ side (python/src/attention_op.cpp) checks the tensors and values
of every call of the ops; the fake implementations check the same shape and value rules with the same messages
(``_check_call``), so that torch.compile refuses at trace time what the real op refuses at run time."""

import math
import numbers
import sys

import torch

__all__ = ["attention"]

_FLOAT_DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def _value_error(message):
    return ValueError(f"drope.attention: {message}")


def _type_error(message):
    return TypeError(f"drope.attention: {message}")


_INT64_MAX = 2**63 - 1
_FLOAT_MAX = sys.float_info.max  # `x < math.inf` holds for an int too large for a double


def _is_int(x):
    return isinstance(x, (numbers.Integral, torch.SymInt)) and not isinstance(x, bool)


def _is_real(x):
    return isinstance(x, (numbers.Real, torch.SymFloat, torch.SymInt)) and not isinstance(x, bool)


def _check_call(q, k, v, causal, window, alibi_slopes, scale, q_offset, temperature):
    """The op's rules (python/src/attention_op.cpp: check_tensors, check_options), for the fake implementations."""
    for name, t, dims in (("q", q, "(B, H, T, D)"), ("k", k, "(B, H_kv, S, D)"), ("v", v, "(B, H_kv, S, D)")):
        if t.dim() != 4:
            raise _value_error(f"{name} must be 4-D {dims}, got shape {list(t.shape)}")
    if q.dtype not in _FLOAT_DTYPES:
        raise _type_error(f"q must be float32, float64, bfloat16 or float16, got {q.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise _type_error(f"{name} has dtype {t.dtype} but q has {q.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise _value_error(f"{name} is on {t.device} but q is on {q.device}")
    if v.shape != k.shape:
        raise _value_error(f"v has shape {list(v.shape)} but k has {list(k.shape)} (both (B, H_kv, S, D))")
    B, H, T, D = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    if k.shape[0] != B:
        raise _value_error(f"k has batch size {k.shape[0]} but q has {B}")
    if k.shape[3] != D:
        raise _value_error(f"k has head dim {k.shape[3]} but q has {D}")
    if D == 0:
        raise _value_error("q has head dim 0")
    if Hkv == 0 or H % Hkv != 0:
        raise _value_error(f"q's {H} heads must be a multiple of k's {Hkv} heads (grouped-query attention)")
    if S == 0:
        raise _value_error("k holds no keys (S = 0)")
    if window < 0:
        raise _value_error(f"window must be >= 0 (0: no window), got {window}")
    if T > S:
        raise _value_error(f"q has {T} queries but k only {S} keys; the queries are the last T of the S positions")
    if q_offset != -1 and not 0 <= q_offset <= S - T:
        raise _value_error(f"q_offset must be in [0, S - T] = [0, {S - T}] (the position of the first query; -1 or "
                           f"None: S - T), got {q_offset}")
    if not (scale >= 0 and scale < math.inf):  # comparisons, not math.isfinite: they trace with a symbolic scale
        raise _value_error(f"scale must be a finite number > 0 (0 or None: 1/sqrt(D)), got {scale}")
    if not (temperature > 0 and temperature < math.inf):
        raise _value_error(f"temperature must be a finite number > 0, got {temperature}")
    if alibi_slopes is not None:
        if alibi_slopes.dim() != 1 or alibi_slopes.shape[0] != H:
            raise _value_error(f"alibi_slopes must have one slope per query head, shape ({H}), got "
                               f"{list(alibi_slopes.shape)}")
        if alibi_slopes.dtype not in (torch.float32, torch.float64):
            raise _type_error(f"alibi_slopes must be float32 or float64, got {alibi_slopes.dtype}")
        if alibi_slopes.device != q.device:
            raise _value_error(f"alibi_slopes is on {alibi_slopes.device} but q is on {q.device}")


@torch.library.register_fake("drope::attention_fwd")
def _attention_fwd_fake(q, k, v, causal=True, window=0, alibi_slopes=None, scale=0.0, q_offset=-1, temperature=1.0):
    _check_call(q, k, v, causal, window, alibi_slopes, scale, q_offset, temperature)
    B, H, T, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((B, H, T), dtype=torch.float32)


@torch.library.register_fake("drope::attention_bwd")
def _attention_bwd_fake(dout, q, k, v, out, lse, causal, window, alibi_slopes, scale, q_offset, temperature):
    _check_call(q, k, v, causal, window, alibi_slopes, scale, q_offset, temperature)
    if dout.shape != q.shape or out.shape != q.shape:
        raise ValueError(f"drope.attention_bwd: dout {list(dout.shape)} and out {list(out.shape)} must have q's "
                         f"shape {list(q.shape)}")
    if lse.dim() != 3 or lse.shape != q.shape[:3]:
        raise ValueError(f"drope.attention_bwd: lse must be (B, H, T) = {list(q.shape[:3])}, got {list(lse.shape)}")
    if dout.dtype not in _FLOAT_DTYPES or out.dtype != q.dtype or lse.dtype != torch.float32:
        raise TypeError("drope.attention_bwd: dout must be floating point, out of q's dtype and lse float32 "
                        f"(attention_fwd's outputs), got {dout.dtype}, {out.dtype}, {lse.dtype}")
    for t in (dout, out, lse):
        if t.device != q.device:
            raise ValueError(f"drope.attention_bwd: dout, out and lse must be on q's device {q.device}")
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, causal, window, alibi_slopes, scale, q_offset, temperature = inputs
    if alibi_slopes is not None and alibi_slopes.requires_grad:
        raise ValueError("drope.attention: alibi_slopes are constants (no gradient); pass alibi_slopes.detach()")
    out, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, out, lse, alibi_slopes)
    ctx.options = (causal, window, scale, q_offset, temperature)


def _backward(ctx, dout, _dlse):
    q, k, v, out, lse, alibi_slopes = ctx.saved_tensors
    causal, window, scale, q_offset, temperature = ctx.options
    dq, dk, dv = torch.ops.drope.attention_bwd(
        dout, q, k, v, out, lse, causal, window, alibi_slopes, scale, q_offset, temperature
    )
    return dq, dk, dv, None, None, None, None, None, None


torch.library.register_autograd("drope::attention_fwd", _backward, setup_context=_setup_context)


def _no_setup(ctx, inputs, output):
    pass


def _double_backward(ctx, *grads):
    # attention_bwd's own derivative is not implemented: without this, autograd would treat the gradients as constants
    # and return wrong second derivatives (with only torch's generic warning).
    raise RuntimeError(
        "drope.attention: double backward (second derivatives through attention, e.g. gradgradcheck, "
        "create_graph=True and a gradient penalty) is not implemented; use torch's scaled_dot_product_attention there"
    )


torch.library.register_autograd("drope::attention_bwd", _double_backward, setup_context=_no_setup)


_AUTOCAST_KEYS = {"cpu": torch._C.DispatchKey.AutocastCPU, "cuda": torch._C.DispatchKey.AutocastCUDA}
_LIB = torch.library.Library("drope", "IMPL")


def _register_autocast(name, cast):
    """torch.autocast for drope::`name`, as torch's SDPA has it: q, k and v (arguments 1..3 of attention_bwd, 0..2 of
    attention_fwd) of a lower-precision-eligible dtype (float32, float16, bfloat16) are cast to the autocast dtype
    when `cast`, and the op runs with autocast off, so that its own float32 arithmetic (the reference implementation,
    the float32 softmax statistics) is not cast down operation by operation."""
    op = getattr(torch.ops.drope, name).default
    first = 1 if name == "attention_bwd" else 0
    excluded = torch._C.DispatchKeySet(_AUTOCAST_KEYS["cpu"]) | torch._C.DispatchKeySet(_AUTOCAST_KEYS["cuda"])

    def run(device_type, args):
        if cast:
            dtype = torch.get_autocast_dtype(device_type)
            args = [a.to(dtype) if first <= i < first + 3 and a.dtype in (torch.float32, torch.float16, torch.bfloat16)
                    else a for i, a in enumerate(args)]
        with torch._C._ExcludeDispatchKeyGuard(excluded):
            return op(*args)

    for device_type, key in _AUTOCAST_KEYS.items():
        op.py_impl(key)(lambda *args, device_type=device_type: run(device_type, args))
        _LIB.impl(name, lambda _keyset, *args, device_type=device_type: run(device_type, args),
                  key.name, with_keyset=True)


_register_autocast("attention_fwd", cast=True)
_register_autocast("attention_bwd", cast=False)


def _readable(t):
    """Whether t's values can be read here without cost: a real CPU tensor outside torch.compile's tracing (fake
    and meta tensors have no values, and reading a GPU tensor's would stall the stream on every call)."""
    return (isinstance(t, torch.Tensor) and not torch.compiler.is_compiling() and t.device.type == "cpu"
            and not torch._subclasses.fake_tensor.is_fake(t))


def _check_arguments(q, k, v, causal, window, alibi_slopes, scale, q_offset, temperature):
    """Python types and ranges of attention()'s arguments, each named (the C++ op checks the tensors' shapes)."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise _type_error(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if not isinstance(causal, bool):
        raise _type_error(f"causal must be True or False, got {causal!r}")
    if not _is_int(window):
        raise _type_error(f"window must be an int (0: no window), got {window!r}")
    if window > _INT64_MAX:  # the op takes an int64: a larger int would fail in the dispatcher, unnamed
        raise _value_error(f"window must be at most 2^63 - 1, got {window}")
    if alibi_slopes is not None and not isinstance(alibi_slopes, torch.Tensor):
        raise _type_error(f"alibi_slopes must be a tensor (H) or None, got {type(alibi_slopes).__name__}")
    if _readable(alibi_slopes) and alibi_slopes.is_floating_point() and not bool(alibi_slopes.isfinite().all()):
        # an infinite or NaN slope makes every output NaN; the op checks only shape, dtype and device
        raise _value_error(f"alibi_slopes must be finite, got {alibi_slopes.tolist()}")
    if scale is not None:
        if not _is_real(scale):
            raise _type_error(f"scale must be a number or None (1/sqrt(D)), got {scale!r}")
        if not (scale > 0 and scale < _FLOAT_MAX):  # NaN fails both; traces with a symbolic scale (torch.compile)
            raise _value_error(f"scale must be a finite number > 0 (None: 1/sqrt(D)), got {scale}")
    if q_offset is not None:
        if not _is_int(q_offset):
            raise _type_error(f"q_offset must be an int or None (S - T), got {q_offset!r}")
        if q_offset < 0 or q_offset > _INT64_MAX:
            raise _value_error(f"q_offset must be in [0, 2^63 - 1] (None: S - T), got {q_offset}")
    if not _is_real(temperature):
        raise _type_error(f"temperature must be a number, got {temperature!r}")
    if not (temperature > 0 and temperature < _FLOAT_MAX):  # an int beyond a double's range would overflow later
        raise _value_error(f"temperature must be a finite number > 0, got {temperature}")


def attention(q, k, v, *, causal=True, window=0, alibi_slopes=None, scale=None, q_offset=None, temperature=1.0):
    """Attention of q (B, H, T, D) over k, v (B, H_kv, S, D); returns (B, H, T, D) in q's dtype.

    H must be a multiple of H_kv (grouped-query attention without repeating k and v). The queries are at positions
    q_offset .. q_offset + T - 1 of the S key positions (None: the last T, as when decoding from a KV cache).
    causal (True or False): key j is visible to query i only if j <= i; window > 0: only if j > i - window;
    alibi_slopes (H), float: the logit bias -slope_h * (i - j) (constants, no gradient). Logits are
    q·k · scale · temperature (scale None: 1/sqrt(D)). Differentiable in q, k and v (once: double backward raises);
    CPU float32 / bfloat16 / float64 and CUDA bfloat16 / float16 with head dim 64 or 128 run the fused kernels, other
    inputs a plain reference implementation. Under torch.autocast, float32 / float16 / bfloat16 q, k and v run in the
    autocast dtype, as SDPA's do (float64 stays). A wrong argument raises ValueError (TypeError for a type) naming it.
    """
    _check_arguments(q, k, v, causal, window, alibi_slopes, scale, q_offset, temperature)
    return torch.ops.drope.attention(
        q,
        k,
        v,
        causal,
        int(window),
        alibi_slopes,
        0.0 if scale is None else float(scale),
        -1 if q_offset is None else int(q_offset),
        float(temperature),
    )
