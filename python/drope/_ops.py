"""The Python side of the drope:: ops: fake implementations (shapes and dtypes for torch.compile and meta tensors),
the autograd formula of attention_fwd (its backward is attention_bwd, from the saved output and log-sum-exp), and
``attention``, the entry point with Python defaults. The C++ side (python/src/attention_op.cpp) checks every
argument and names the one that is wrong."""

import torch

__all__ = ["attention"]


def _check_devices(q, k, v):
    """The one check a fake implementation makes: a meta tensor beside a real one dispatches here, not to C++."""
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"drope.attention: {name} is on {t.device} but q is on {q.device}")


@torch.library.register_fake("drope::attention_fwd")
def _attention_fwd_fake(q, k, v, causal=True, window=0, alibi_slopes=None, scale=0.0, q_offset=-1, temperature=1.0):
    _check_devices(q, k, v)
    B, H, T, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((B, H, T), dtype=torch.float32)


@torch.library.register_fake("drope::attention_bwd")
def _attention_bwd_fake(dout, q, k, v, out, lse, causal, window, alibi_slopes, scale, q_offset, temperature):
    _check_devices(q, k, v)
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


def attention(q, k, v, *, causal=True, window=0, alibi_slopes=None, scale=None, q_offset=None, temperature=1.0):
    """Attention of q (B, H, T, D) over k, v (B, H_kv, S, D); returns (B, H, T, D) in q's dtype.

    H must be a multiple of H_kv (grouped-query attention without repeating k and v). The queries are at positions
    q_offset .. q_offset + T - 1 of the S key positions (None: the last T, as when decoding from a KV cache).
    causal: key j is visible to query i only if j <= i; window > 0: only if j > i - window; alibi_slopes (H), float:
    the logit bias -slope_h * (i - j) (constants, no gradient). Logits are q·k · scale · temperature (scale None:
    1/sqrt(D)). Differentiable in q, k and v; CPU float32 / bfloat16 / float64 and CUDA bfloat16 / float16 with head
    dim 64 or 128 run the fused kernels, other inputs a plain reference implementation.
    """
    if scale is not None and not scale > 0:
        raise ValueError(f"drope.attention: scale must be > 0 (None: 1/sqrt(D)), got {scale}")
    if q_offset is not None and q_offset < 0:
        raise ValueError(f"drope.attention: q_offset must be >= 0 (None: S - T), got {q_offset}")
    return torch.ops.drope.attention(
        q,
        k,
        v,
        causal,
        window,
        alibi_slopes,
        0.0 if scale is None else float(scale),
        -1 if q_offset is None else int(q_offset),
        float(temperature),
    )
