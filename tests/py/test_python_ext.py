"""The Python package drope (python/): torch.ops.drope.attention against float64 central differences
(gradcheck) and torch's SDPA (outputs and gradients) over the attention test grid, the reference fallback for
dtypes the kernels do not take, errors that name the bad argument, torch.library.opcheck and torch.compile.

Skips when the package is not installed (.venv/bin/pip install --no-build-isolation ./python), unless
DROPE_REQUIRE_PYTHON_EXT=1, where a missing package fails."""

import math
import os
from dataclasses import dataclass, replace

import pytest
import torch

try:
    import drope

    IMPORT_ERROR = None
except ImportError as e:  # the package is optional outside CI
    drope, IMPORT_ERROR = None, e

needs_drope = pytest.mark.skipif(
    drope is None,
    reason=f"the drope Python package is not installed ({IMPORT_ERROR}); "
    "install it with .venv/bin/pip install --no-build-isolation ./python",
)


def test_package_imports_when_required():
    if os.environ.get("DROPE_REQUIRE_PYTHON_EXT") != "1":
        pytest.skip("DROPE_REQUIRE_PYTHON_EXT is not 1")
    assert drope is not None, f"import drope failed: {IMPORT_ERROR}"
    assert hasattr(torch.ops.drope, "attention_fwd")


@dataclass(frozen=True)
class Case:
    """One call: q (B, H, T, D), k/v (B, Hkv, S, D) and the op's options."""

    B: int = 2
    H: int = 4
    Hkv: int = 4
    T: int = 7
    S: int = 7
    D: int = 8
    causal: bool = True
    window: int = 0
    alibi: bool = False
    scale: float | None = None
    q_offset: int | None = None
    temperature: float = 1.0

    def inputs(self, dtype, seed=0, requires_grad=False):
        g = torch.Generator().manual_seed(seed)
        q = torch.randn(self.B, self.H, self.T, self.D, generator=g, dtype=torch.float64)
        k = torch.randn(self.B, self.Hkv, self.S, self.D, generator=g, dtype=torch.float64)
        v = torch.randn(self.B, self.Hkv, self.S, self.D, generator=g, dtype=torch.float64)
        return [t.to(dtype).requires_grad_(requires_grad) for t in (q, k, v)]

    def slopes(self, dtype=torch.float32):
        return torch.tensor([2.0 ** (-8.0 * (h + 1) / self.H) for h in range(self.H)], dtype=dtype)

    def kwargs(self):
        return dict(causal=self.causal, window=self.window, alibi_slopes=self.slopes() if self.alibi else None,
                    scale=self.scale, q_offset=self.q_offset, temperature=self.temperature)


GRID = {
    "causal": Case(),
    "full": Case(causal=False),
    "window": Case(window=3),
    "window_full": Case(causal=False, window=2),
    "alibi": Case(alibi=True),
    "gqa_alibi_window": Case(H=4, Hkv=2, alibi=True, window=4),
    "mqa": Case(H=4, Hkv=1),
    "kv_cache": Case(T=3, S=9),
    "q_offset": Case(T=3, S=9, q_offset=2, window=4),
    "q_offset_full_alibi": Case(T=3, S=9, q_offset=4, causal=False, alibi=True),
    "decode": Case(T=1, S=9, H=4, Hkv=2),
    "temperature": Case(temperature=1.7),
    "scale_temperature": Case(scale=0.3, temperature=0.6, window=5),
    "odd_head_dim": Case(D=5, Hkv=2, alibi=True),
}


def sdpa_reference(case, q, k, v):
    """The same attention through torch's SDPA: masks and ALiBi as an additive bias, k/v repeated per group."""
    T, S, H = case.T, case.S, case.H
    off = S - T if case.q_offset is None else case.q_offset
    i = torch.arange(off, off + T).view(T, 1)
    j = torch.arange(S).view(1, S)
    visible = torch.ones(T, S, dtype=torch.bool)
    if case.causal:
        visible &= j <= i
    if case.window:
        visible &= j > i - case.window
    bias = torch.zeros(1, H, T, S, dtype=q.dtype).masked_fill(~visible, float("-inf"))
    if case.alibi:
        bias = bias - case.slopes(q.dtype).view(1, H, 1, 1) * (i - j).to(q.dtype)
    base = case.scale if case.scale is not None else 1.0 / math.sqrt(case.D)
    G = case.H // case.Hkv
    return torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(G, 1), v.repeat_interleave(G, 1), attn_mask=bias, scale=base * case.temperature
    )


def out_and_grads(fn, q, k, v, dout):
    out = fn(q, k, v)
    grads = torch.autograd.grad(out, (q, k, v), dout)
    return [out.detach(), *grads]


@needs_drope
@pytest.mark.parametrize("name", GRID)
def test_gradcheck_float64(name):
    case = GRID[name]
    q, k, v = replace(case, B=1).inputs(torch.float64, requires_grad=True)
    kw = case.kwargs()
    if kw["alibi_slopes"] is not None:
        kw["alibi_slopes"] = kw["alibi_slopes"].double()
    assert torch.autograd.gradcheck(lambda q, k, v: drope.attention(q, k, v, **kw), (q, k, v))


@needs_drope
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", GRID)
def test_parity_with_sdpa(name, dtype):
    """Output and gradients within 2x SDPA's own error in that dtype, both against SDPA in float64."""
    case = GRID[name]
    dout = torch.randn(case.B, case.H, case.T, case.D, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    exact = out_and_grads(lambda q, k, v: sdpa_reference(case, q, k, v),
                          *case.inputs(torch.float64, requires_grad=True), dout)
    dout = dout.to(dtype)
    ours = out_and_grads(lambda q, k, v: drope.attention(q, k, v, **case.kwargs()),
                         *case.inputs(dtype, requires_grad=True), dout)
    theirs = out_and_grads(lambda q, k, v: sdpa_reference(case, q, k, v), *case.inputs(dtype, requires_grad=True), dout)
    floor = torch.finfo(dtype).eps
    for what, a, b, ref in zip(("out", "dq", "dk", "dv"), ours, theirs, exact):
        assert a.dtype == dtype and a.shape == ref.shape, what
        err = (a.double() - ref).abs().max().item() / ref.abs().max().item()
        bound = 2 * (b.double() - ref).abs().max().item() / ref.abs().max().item() + floor
        assert err <= bound, f"{what}: relative error {err:.3g} > {bound:.3g} (2x SDPA's)"


@needs_drope
@pytest.mark.parametrize("name", ["gqa_alibi_window", "q_offset", "temperature"])
def test_float16_runs_the_reference(name):
    """CPU float16 is no kernel's dtype: forward and backward run the reference, in float32 inside."""
    case = GRID[name]
    q, k, v = case.inputs(torch.float64, requires_grad=True)
    exact = out_and_grads(lambda q, k, v: drope.attention(q, k, v, **case.kwargs()), q, k, v,
                          torch.ones(case.B, case.H, case.T, case.D, dtype=torch.float64))
    half = out_and_grads(lambda q, k, v: drope.attention(q, k, v, **case.kwargs()),
                         *case.inputs(torch.float16, requires_grad=True),
                         torch.ones(case.B, case.H, case.T, case.D, dtype=torch.float16))
    for a, ref in zip(half, exact):
        assert a.dtype == torch.float16
        torch.testing.assert_close(a.double(), ref, rtol=2e-2, atol=2e-2)


@needs_drope
def test_torch_ops_default_arguments():
    """The schema's defaults: causal, no window, no ALiBi, 1/sqrt(D), queries end the keys, temperature 1."""
    case = Case(T=4, S=6)
    q, k, v = case.inputs(torch.float32)
    out, lse = torch.ops.drope.attention_fwd(q, k, v)
    assert lse.shape == (case.B, case.H, case.T) and lse.dtype == torch.float32
    torch.testing.assert_close(out, sdpa_reference(case, q, k, v))
    torch.testing.assert_close(torch.ops.drope.attention(q, k, v), out)
    assert not lse.requires_grad


@needs_drope
def test_empty_batch():
    q, k, v = Case(B=0).inputs(torch.float32, requires_grad=True)
    out = drope.attention(q, k, v)
    out.sum().backward()
    assert out.shape == q.shape and q.grad.shape == q.shape


def bad_calls():
    """(description, call, words the error must contain); each call is one wrong argument."""
    c = Case(T=4, S=6, H=4, Hkv=2)
    q, k, v = c.inputs(torch.float32)
    a = drope.attention
    ops = torch.ops.drope
    return [
        ("q 3-D", lambda: a(q[0], k, v), "q must be 4-D"),
        ("k 3-D", lambda: a(q, k[0], v), "k must be 4-D"),
        ("v shape", lambda: a(q, k, v[:, :, :5]), "v has shape"),
        ("batch", lambda: a(q, k[:1], v[:1]), "k has batch size"),
        ("head dim", lambda: a(q, k[..., :4], v[..., :4]), "k has head dim"),
        ("heads", lambda: a(q[:, :3], k, v), "heads must be a multiple"),
        ("k dtype", lambda: a(q, k.double(), v.double()), "k has dtype"),
        ("v dtype", lambda: a(q, k, v.double()), "v has dtype"),
        ("q dtype", lambda: a(q.int(), k.int(), v.int()), "q must be float"),
        ("k device", lambda: a(q, k.to("meta"), v), "k is on meta"),
        ("no keys", lambda: a(q[:, :, :0], k[:, :, :0], v[:, :, :0]), "no keys"),
        ("more queries than keys", lambda: a(q, k[:, :, :3], v[:, :, :3]), "queries but k only"),
        ("window", lambda: a(q, k, v, window=-1), "window must be >= 0"),
        ("slopes length", lambda: a(q, k, v, alibi_slopes=torch.ones(3)), "alibi_slopes must have one slope"),
        ("slopes dtype", lambda: a(q, k, v, alibi_slopes=torch.ones(4, dtype=torch.int64)), "alibi_slopes must be"),
        ("slopes grad", lambda: a(q.requires_grad_(), k, v, alibi_slopes=torch.ones(4, requires_grad=True)),
         "alibi_slopes are constants"),
        ("q_offset python", lambda: a(q, k, v, q_offset=-2), "q_offset must be in [0, 2^63 - 1]"),
        ("q_offset huge", lambda: a(q, k, v, q_offset=2**70), "q_offset must be in [0, 2^63 - 1]"),
        ("window huge", lambda: a(q, k, v, window=2**70), "window must be at most 2^63 - 1"),
        ("scale huge int", lambda: a(q, k, v, scale=10**400), "scale must be a finite number > 0"),
        ("temperature huge int", lambda: a(q, k, v, temperature=10**400), "temperature must be a finite number"),
        ("q_offset range", lambda: a(q, k, v, q_offset=3), "q_offset must be in [0, S - T]"),
        ("q_offset op", lambda: ops.attention(q, k, v, q_offset=-3), "q_offset must be in"),
        ("scale python", lambda: a(q, k, v, scale=0.0), "scale must be a finite number > 0"),
        ("scale op", lambda: ops.attention(q, k, v, scale=-1.0), "scale must be"),
        ("scale nan", lambda: ops.attention(q, k, v, scale=float("nan")), "scale must be"),
        ("temperature", lambda: a(q, k, v, temperature=0.0), "temperature must be"),
        ("temperature inf", lambda: a(q, k, v, temperature=float("inf")), "temperature must be"),
        ("bwd lse", lambda: ops.attention_bwd(q, q, k, v, q, q, True, 0, None, 0.0, -1, 1.0), "lse must be"),
        ("bwd dout", lambda: ops.attention_bwd(q[:, :, :2], q, k, v, q, q[..., 0], True, 0, None, 0.0, -1, 1.0),
         "dout"),
    ]


@needs_drope
@pytest.mark.parametrize("index", range(30))
def test_bad_argument_raises_naming_it(index):
    calls = bad_calls()
    assert len(calls) == 30
    what, call, words = calls[index]
    with pytest.raises((ValueError, TypeError)) as e:
        call()
    assert words in str(e.value), f"{what}: {e.value}"


@needs_drope
@pytest.mark.parametrize("slope", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_alibi_slopes_are_refused(slope):
    """A non-finite slope would make every output NaN: refused naming alibi_slopes, in float32 and float64."""
    q, k, v = Case(T=4, S=6, H=2, Hkv=2).inputs(torch.float32)
    for dtype in (torch.float32, torch.float64):
        with pytest.raises(ValueError, match="alibi_slopes must be finite"):
            drope.attention(q, k, v, alibi_slopes=torch.tensor([slope, 0.5], dtype=dtype))
    assert drope.attention(q, k, v, alibi_slopes=torch.tensor([0.25, 0.5])).isfinite().all()


@needs_drope
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_matches_cpu_and_rejects_mixed_devices():
    case = Case(H=4, Hkv=2, T=64, S=64, D=64, alibi=True, window=16)
    q, k, v = case.inputs(torch.bfloat16)
    kw = case.kwargs()
    with pytest.raises(ValueError, match="k is on"):
        drope.attention(q.cuda(), k, v.cuda(), **kw)
    ref = out_and_grads(lambda q, k, v: drope.attention(q, k, v, **kw), *case.inputs(torch.float32, requires_grad=True),
                        torch.ones(case.B, case.H, case.T, case.D))
    kw["alibi_slopes"] = kw["alibi_slopes"].cuda()
    cu = [t.detach().cuda().requires_grad_() for t in (q, k, v)]
    got = out_and_grads(lambda q, k, v: drope.attention(q, k, v, **kw), *cu,
                        torch.ones(case.B, case.H, case.T, case.D, dtype=torch.bfloat16, device="cuda"))
    for a, b in zip(got, ref):
        torch.testing.assert_close(a.float().cpu(), b, rtol=3e-2, atol=3e-2)


@needs_drope
@pytest.mark.parametrize("name", ["gqa_alibi_window", "q_offset_full_alibi"])
def test_opcheck(name):
    """Schema, fake implementation, autograd registration and AOT dispatch agree with the real kernel."""
    case = replace(GRID[name], B=1)
    q, k, v = case.inputs(torch.float32, requires_grad=True)
    kw = case.kwargs()
    q_offset = -1 if case.q_offset is None else case.q_offset
    args = (q, k, v, kw["causal"], kw["window"], kw["alibi_slopes"], 0.0, q_offset, kw["temperature"])
    torch.library.opcheck(torch.ops.drope.attention_fwd.default, args)


@needs_drope
def test_compile_fullgraph_matches_eager():
    """torch.compile(fullgraph=True) traces the op and its backward (fake implementations) without graph breaks."""
    case = GRID["gqa_alibi_window"]
    kw = case.kwargs()

    def loss(q, k, v):
        return (drope.attention(q, k, v, **kw) * torch.linspace(-1, 1, case.D)).sum()

    torch._dynamo.reset()
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    dout = torch.tensor(1.0)
    eager = out_and_grads(loss, *case.inputs(torch.float32, requires_grad=True), dout)
    got = out_and_grads(compiled, *case.inputs(torch.float32, requires_grad=True), dout)
    for a, b in zip(got, eager):
        torch.testing.assert_close(a, b)


def type_errors():
    """(description, call, words): a Python value of the wrong type for one argument of drope.attention."""
    q, k, v = Case(T=4, S=6, H=4, Hkv=2).inputs(torch.float32)
    a = drope.attention
    return [
        ("causal None", lambda: a(q, k, v, causal=None), "causal must be True or False"),
        ("causal int", lambda: a(q, k, v, causal=1), "causal must be True or False"),
        ("causal str", lambda: a(q, k, v, causal="yes"), "causal must be True or False"),
        ("window float", lambda: a(q, k, v, window=2.5), "window must be an int"),
        ("window str", lambda: a(q, k, v, window="3"), "window must be an int"),
        ("window bool", lambda: a(q, k, v, window=True), "window must be an int"),
        ("scale str", lambda: a(q, k, v, scale="0.5"), "scale must be a number"),
        ("scale tensor", lambda: a(q, k, v, scale=[0.5]), "scale must be a number"),
        ("scale inf", lambda: a(q, k, v, scale=float("inf")), "scale must be a finite number > 0"),
        ("q_offset float", lambda: a(q, k, v, q_offset=1.0), "q_offset must be an int"),
        ("temperature str", lambda: a(q, k, v, temperature="1.2"), "temperature must be a number"),
        ("temperature None", lambda: a(q, k, v, temperature=None), "temperature must be a number"),
        ("slopes list", lambda: a(q, k, v, alibi_slopes=[0.5] * 4), "alibi_slopes must be a tensor"),
        ("q list", lambda: a(q.tolist(), k, v), "q must be a torch.Tensor"),
        ("v None", lambda: a(q, k, None), "v must be a torch.Tensor"),
    ]


@needs_drope
@pytest.mark.parametrize("index", range(15))
def test_bad_python_types_are_named(index):
    calls = type_errors()
    assert len(calls) == 15
    what, call, words = calls[index]
    with pytest.raises((TypeError, ValueError)) as e:
        call()
    assert words in str(e.value) and str(e.value).startswith("drope.attention: "), f"{what}: {e.value}"


@needs_drope
@pytest.mark.parametrize("index", [i for i in range(26) if i not in (9, 15)])  # 9: a meta k; 15: autograd's own
def test_fake_implementation_refuses_what_the_op_refuses(index):
    """Every bad call of bad_calls() raises the same error type, with the same words, under FakeTensorMode (the fake
    implementations, what torch.compile traces) as with real tensors: a call that traces also runs."""
    what, call, words = bad_calls()[index]
    with pytest.raises((ValueError, TypeError)) as real:
        call()
    with pytest.raises(type(real.value)) as fake, torch._subclasses.fake_tensor.FakeTensorMode(
            allow_non_fake_inputs=True):
        call()
    assert words in str(fake.value), f"{what}: fake says {fake.value!r}, the op says {real.value!r}"


@needs_drope
def test_fake_implementation_under_compile_refuses_a_bad_shape():
    q, k, v = Case(T=4, S=6, H=4, Hkv=2).inputs(torch.float32)
    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: drope.attention(q, k, v), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match="q must be 4-D"):
        compiled(q[0], k, v)


@needs_drope
def test_double_backward_is_refused():
    """Second derivatives are not implemented: gradgradcheck (and any backward through the gradients) raises a clear
    error instead of returning wrong numbers; first derivatives with create_graph=True still work."""
    case = replace(GRID["gqa_alibi_window"], B=1)
    q, k, v = case.inputs(torch.float64, requires_grad=True)
    kw = {**case.kwargs(), "alibi_slopes": case.slopes(torch.float64)}
    with pytest.raises(RuntimeError, match=r"double backward .* is not implemented"):
        torch.autograd.gradgradcheck(lambda q, k, v: drope.attention(q, k, v, **kw), (q, k, v))
    out = drope.attention(q, k, v, **kw)
    (dq,) = torch.autograd.grad(out.sum(), q, create_graph=True)
    ref = torch.autograd.grad(sdpa_reference(case, q, k, v).sum(), q)[0]
    torch.testing.assert_close(dq, ref)
    with pytest.raises(RuntimeError, match="double backward"):
        dq.sum().backward()


@needs_drope
@pytest.mark.parametrize("name", GRID)
def test_float64_is_computed_in_float64(name):
    """float64 output and gradients agree with SDPA in float64 to float64 precision (not float32's log-sum-exp)."""
    case = GRID[name]
    dout = torch.randn(case.B, case.H, case.T, case.D, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    kw = case.kwargs()
    if kw["alibi_slopes"] is not None:
        kw["alibi_slopes"] = kw["alibi_slopes"].double()
    ours = out_and_grads(lambda q, k, v: drope.attention(q, k, v, **kw),
                         *case.inputs(torch.float64, requires_grad=True), dout)
    exact = out_and_grads(lambda q, k, v: sdpa_reference(case, q, k, v),
                          *case.inputs(torch.float64, requires_grad=True), dout)
    for what, a, b in zip(("out", "dq", "dk", "dv"), ours, exact):
        assert a.dtype == torch.float64
        err = (a - b).abs().max().item() / b.abs().max().item()
        assert err < 1e-12, f"{what}: relative error {err:.3g}"


@needs_drope
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("name", GRID)
def test_opcheck_over_the_grid(name, dtype):
    """torch.library.opcheck (schema, fake implementation, autograd registration, AOT dispatch) over the whole grid,
    for attention_fwd and attention_bwd."""
    case = replace(GRID[name], B=1)
    q, k, v = case.inputs(dtype, requires_grad=True)
    kw = case.kwargs()
    slopes = None if kw["alibi_slopes"] is None else kw["alibi_slopes"].to(dtype)
    q_offset = -1 if case.q_offset is None else case.q_offset
    scale = 0.0 if case.scale is None else case.scale
    opts = (kw["causal"], kw["window"], slopes, scale, q_offset, kw["temperature"])
    torch.library.opcheck(torch.ops.drope.attention_fwd.default, (q, k, v, *opts))
    out, lse = torch.ops.drope.attention_fwd(q.detach(), k.detach(), v.detach(), *opts)
    torch.library.opcheck(torch.ops.drope.attention_bwd.default,
                          (torch.ones_like(out), q.detach(), k.detach(), v.detach(), out, lse, *opts))


@needs_drope
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_runs_in_the_autocast_dtype_as_sdpa(dtype):
    """Under torch.autocast, float32 (and mixed float32 / lower-precision) q, k, v run in the autocast dtype, as torch's
    SDPA runs them: the same dtype out, the same values as a call on inputs cast by hand, gradients in the inputs'
    dtypes; float64 is left in float64."""
    case = GRID["gqa_alibi_window"]
    q, k, v = case.inputs(torch.float32, requires_grad=True)
    kw = case.kwargs()
    with torch.autocast("cpu", dtype=dtype):
        out = drope.attention(q, k, v, **kw)
        mixed = drope.attention(q.to(dtype), k, v, **kw)
        assert sdpa_reference(case, q, k, v).dtype == dtype
        wide = drope.attention(*(t.double() for t in (q, k, v)), **{**kw, "alibi_slopes": case.slopes(torch.float64)})
    by_hand = drope.attention(q.to(dtype), k.to(dtype), v.to(dtype), **kw)
    assert out.dtype == mixed.dtype == dtype and wide.dtype == torch.float64
    torch.testing.assert_close(out, by_hand, rtol=0, atol=0)
    torch.testing.assert_close(mixed, by_hand, rtol=0, atol=0)
    grads = torch.autograd.grad(out.float().sum(), (q, k, v))
    assert all(g.dtype == torch.float32 and g.shape == t.shape for g, t in zip(grads, (q, k, v)))


@needs_drope
def test_autocast_under_compile():
    case = GRID["gqa_alibi_window"]
    q, k, v = case.inputs(torch.float32)
    kw = case.kwargs()

    def f(q, k, v):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return drope.attention(q, k, v, **kw)

    torch._dynamo.reset()
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, f(q, k, v), rtol=0, atol=0)


@needs_drope
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_input_layouts_are_read_as_they_are(dtype):
    """Transposed, sliced and expanded (stride-0) q, k and v give the output and gradients of contiguous copies."""
    case = Case(H=4, Hkv=2, T=5, S=9)
    g = torch.Generator().manual_seed(4)
    base = [torch.randn(1, case.T, case.H, case.D, generator=g, dtype=torch.float64).to(dtype).requires_grad_(),
            torch.randn(1, case.Hkv, 2 * case.S, case.D, generator=g, dtype=torch.float64).to(dtype).requires_grad_(),
            torch.randn(1, 1, case.S, 2 * case.D, generator=g, dtype=torch.float64).to(dtype).requires_grad_()]

    def views(q, k, v):  # (B, T, H, D) transposed; every other key; v's heads expanded and every other channel
        return (q.transpose(1, 2).expand(case.B, -1, -1, -1), k[:, :, ::2].expand(case.B, -1, -1, -1),
                v[..., ::2].expand(case.B, case.Hkv, -1, -1))

    dout = torch.randn(case.B, case.H, case.T, case.D, generator=g, dtype=torch.float64).to(dtype)
    strided = out_and_grads(lambda *t: drope.attention(*views(*t), window=4), *base, dout)
    copies = out_and_grads(lambda *t: drope.attention(*(x.contiguous() for x in views(*t)), window=4), *base, dout)
    assert not views(*base)[1].is_contiguous()
    for a, b in zip(strided, copies):
        torch.testing.assert_close(a, b)
