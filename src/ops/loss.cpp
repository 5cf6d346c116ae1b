#include "drope/ops/loss.h"

#include <algorithm>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "drope/kernels/layers_cpu.h"
#include "drope/ops/compute_weights.h"
#include "drope/ops/layers.h"

namespace drope::ops {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct Sums {
  at::Tensor loss;          // scalar, float32/64: sum over counted rows
  at::Tensor dhidden, dweight;  // gradients of the *sum* (undefined unless asked)
};

// One pass over row chunks: loss sum and, when asked, the gradients of the summed loss (the autograd function
// scales them by the incoming gradient over the token count in its backward, on the device).
Sums chunked(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels, int64_t ignore_index,
             int64_t chunk_rows, bool grad_hidden, bool grad_weight, bool fused) {
  const int64_t N = hidden.size(0), V = weight.size(0);
  const auto acc = hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  // GEMM dtype: the autocast dtype when autocast is on for this device (the unfused path's matmul would
  // run in it too), else the inputs'.
  const auto dev = hidden.device().type();
  const auto gemm =
      at::autocast::is_autocast_enabled(dev) ? at::autocast::get_autocast_dtype(dev) : hidden.scalar_type();
  // The installed bf16 copy of the head's weight (refreshed once per optimizer step) when there is one.
  ComputeWeights* cw = gemm == at::kBFloat16 ? compute_weights_for(hidden, {weight}) : nullptr;
  at::Tensor w = cw ? cw->get({weight}) : weight.to(gemm);
  // Auto: chunks of 64M logits (256 MB in float32). Smaller chunks save more memory but re-read the weight and
  // re-accumulate its gradient once per chunk, which slows the step; chunks this large run as fast as the full
  // logits (docs/benchmarks.md#defaults-chosen-by-measurement).
  if (chunk_rows <= 0) chunk_rows = std::max<int64_t>((int64_t(64) << 20) / std::max<int64_t>(V, 1), 64);

  Sums out;
  out.loss = at::zeros({}, hidden.options().dtype(acc));
  if (grad_hidden) out.dhidden = at::empty_like(hidden);
  if (grad_weight) out.dweight = at::zeros_like(weight);
  const bool grad = grad_hidden || grad_weight;
  for (int64_t r = 0; r < N; r += chunk_rows) {
    const int64_t n = std::min(chunk_rows, N - r);
    const auto h = hidden.narrow(0, r, n).to(gemm);
    const auto y = labels.narrow(0, r, n);
    auto logits = matmul_nt(h, w);
    const auto keep = y.ne(ignore_index);
    const auto yc = at::where(keep, y, at::zeros_like(y)).unsqueeze(1);
    at::Tensor pg;  // d(sum loss)/d logits in the GEMM dtype (softmax − onehot; 0 on ignored rows)
    if (fused && logits.device().is_cpu() && logits.scalar_type() == at::kBFloat16 && acc == at::kFloat &&
        logits.is_contiguous()) {
      // bf16 logits on the CPU: the same row kernel, each row in float32 inside it, the gradient in place in bf16.
      auto rows = at::empty({n}, logits.options().dtype(at::kFloat));
      const auto yv = y.contiguous();
      kernels::softmax_xent_bf16_cpu({static_cast<uint16_t*>(logits.data_ptr()), yv.data_ptr<int64_t>(),
                                      rows.data_ptr<float>(), n, V, ignore_index, 1.0, grad});
      out.loss.add_(rows.sum());
      if (grad) pg = logits;
    } else if (fused && logits.device().is_cpu() && logits.scalar_type() == acc && logits.is_contiguous()) {
      // One kernel per chunk: each row read once from memory, its loss and (in place) its gradient.
      auto rows = at::empty({n}, logits.options());
      const auto yv = y.contiguous();
      if (acc == at::kDouble) {
        kernels::SoftmaxXentArgs<double> a{
            logits.data_ptr<double>(), yv.data_ptr<int64_t>(), rows.data_ptr<double>(), n, V, ignore_index, 1.0, grad};
        kernels::softmax_xent_cpu(a);
      } else {
        kernels::SoftmaxXentArgs<float> a{
            logits.data_ptr<float>(), yv.data_ptr<int64_t>(), rows.data_ptr<float>(), n, V, ignore_index, 1.0f, grad};
        kernels::softmax_xent_cpu(a);
      }
      out.loss.add_(rows.sum());
      if (grad) pg = logits;
    } else if (fused) {
      // ATen's log-softmax read straight from the GEMM's dtype (CUDA: half_to_float) and its backward written
      // straight into it: no float copy of the logits, no separate max / exp / sum / divide / scale passes.
      const bool h2f = logits.is_cuda() && logits.scalar_type() != acc;
      const auto lsm = h2f ? at::_log_softmax(logits, 1, /*half_to_float=*/true)
                           : at::_log_softmax(logits.to(acc), 1, /*half_to_float=*/false);
      out.loss.sub_((lsm.gather(1, yc).squeeze(1) * keep).sum());
      if (grad) {
        // d/dx of −Σ go·lsm with go = −1 at the label: softmax − onehot.
        auto go = at::zeros_like(lsm);
        go.scatter_(1, yc, keep.to(acc).neg().unsqueeze(1));
        pg = at::_log_softmax_backward_data(go, lsm, 1, h2f ? logits.scalar_type() : acc).to(gemm);
      }
    } else {
      if (logits.scalar_type() != acc) logits = logits.to(acc);
      // log Σ exp with the row max subtracted in place, so no second (n, V) buffer exists (at::logsumexp
      // would allocate one for exp(logits − max)): loss = log Σ exp(x − m) − (x_y − m).
      logits.sub_(logits.amax(1, /*keepdim=*/true));
      const auto picked = logits.gather(1, yc);
      const auto sumexp = logits.exp_().sum(1, /*keepdim=*/true);
      out.loss.add_(((sumexp.log() - picked).squeeze(1) * keep).sum());
      if (!grad) continue;
      auto p = logits.div_(sumexp);
      p.scatter_add_(1, yc, at::full({n, 1}, -1.0, p.options()));
      p.mul_(keep.to(acc).unsqueeze(1));
      pg = p.to(gemm);
    }
    if (!grad) continue;
    if (gemm == acc) {
      // In place, with the transposes as BLAS flags: no copy of pᵀ (a chunk of logits) or of W, and no
      // (V, C) product beside the accumulator.
      if (grad_hidden) {
        auto dh = out.dhidden.narrow(0, r, n);
        at::mm_out(dh, pg, w);  // p · W
      }
      if (grad_weight) out.dweight.addmm_(pg.t(), h);  // += pᵀ · h
    } else {
      if (grad_hidden) out.dhidden.narrow(0, r, n).copy_(matmul_nt(pg, w.t()));  // p · W
      if (grad_weight) out.dweight.add_(matmul_nt(pg.t(), h.t()));             // pᵀ · h
    }
  }
  return out;
}

class LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& hidden, const at::Tensor& weight,
                            const at::Tensor& labels, int64_t ignore_index, int64_t chunk_rows, bool grad_hidden,
                            bool grad_weight, bool fused) {
    // The mean's divisor stays on the device, so that no .item() waits for the GPU to finish the forward before
    // the loss's kernels can be queued: the chunks form the gradients of the sum, and the backward scales them by
    // grad / count in the one pass it makes over them anyway.
    const auto count = labels.ne(ignore_index).sum().to(hidden.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
    auto s = chunked(hidden, weight, labels, ignore_index, chunk_rows, grad_hidden, grad_weight, fused);
    ctx->save_for_backward({s.dhidden, s.dweight, count});
    return s.loss / count;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto g = grads[0] / saved[2];  // the incoming gradient of the mean, over the counted rows
    auto scaled = [&](const at::Tensor& t) { return t.defined() ? t * g.to(t.scalar_type()) : at::Tensor(); };
    return {scaled(saved[0]), scaled(saved[1]), at::Tensor(), at::Tensor(),
            at::Tensor(),     at::Tensor(),     at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor linear_cross_entropy(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& labels,
                                int64_t ignore_index, int64_t chunk_rows, bool fused) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "linear_cross_entropy: hidden (N, C) and weight (V, C) expected, got ", hidden.sizes(), " and ",
              weight.sizes());
  TORCH_CHECK(labels.dim() == 1 && labels.size(0) == hidden.size(0) && labels.scalar_type() == at::kLong,
              "linear_cross_entropy: labels must be int64 (N) = (", hidden.size(0), "), got ", labels.sizes(), " ",
              labels.scalar_type());
  const auto valid = labels.eq(ignore_index).logical_or(labels.ge(0).logical_and(labels.lt(weight.size(0))));
  if (labels.is_cpu()) {
    TORCH_CHECK(valid.all().item<bool>(), "linear_cross_entropy: labels must lie in [0, ", weight.size(0),
                ") or equal ignore_index ", ignore_index);
  } else {  // checked on the device, without a synchronisation (the trainer checks token ids when it loads them)
    at::_assert_async(valid.all(), "linear_cross_entropy: labels must lie in [0, vocabulary) or equal ignore_index");
  }
  const bool grad = torch::GradMode::is_enabled();
  return LinearCrossEntropy::apply(hidden, weight, labels, ignore_index, chunk_rows, grad && hidden.requires_grad(),
                                   grad && weight.requires_grad(), fused);
}

}  // namespace drope::ops
