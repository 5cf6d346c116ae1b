#include "drope/model/positional.h"

#include "drope/ops/layers.h"

namespace drope {

namespace {

class RopePositional final : public Positional {
 public:
  explicit RopePositional(int64_t window) : window_(window) {}
  void encode(torch::Tensor& q, torch::Tensor& k, const PositionContext& ctx) const override {
    q = apply_rotary(q, ctx.cos, ctx.sin);
    k = apply_rotary(k, ctx.cos, ctx.sin);
  }
  void configure(ops::AttentionParams& p) const override { p.window = window_; }
  PositionalKind kind() const override { return PositionalKind::kRope; }

 private:
  int64_t window_;
};

class NoPositional final : public Positional {
 public:
  explicit NoPositional(int64_t window) : window_(window) {}
  void encode(torch::Tensor&, torch::Tensor&, const PositionContext&) const override {}
  void configure(ops::AttentionParams& p) const override { p.window = window_; }
  PositionalKind kind() const override { return PositionalKind::kNope; }

 private:
  int64_t window_;
};

class AlibiPositional final : public Positional {
 public:
  AlibiPositional(int64_t num_heads, int64_t window) : window_(window) {
    auto s = ops::alibi_slopes(num_heads);
    slopes_ = torch::tensor(s, torch::kFloat);
  }
  void encode(torch::Tensor&, torch::Tensor&, const PositionContext&) const override {}
  void configure(ops::AttentionParams& p) const override {
    p.window = window_;
    p.alibi_slopes = slopes_;
  }
  PositionalKind kind() const override { return PositionalKind::kAlibi; }

 private:
  int64_t window_;
  torch::Tensor slopes_;  // (H)
};

}  // namespace

std::unique_ptr<Positional> make_positional(const LayerPositional& layer, int64_t num_heads) {
  switch (layer.kind) {
    case PositionalKind::kRope: return std::make_unique<RopePositional>(layer.window);
    case PositionalKind::kNope: return std::make_unique<NoPositional>(layer.window);
    case PositionalKind::kAlibi: return std::make_unique<AlibiPositional>(num_heads, layer.window);
  }
  TORCH_INTERNAL_ASSERT(false, "unhandled positional kind");
}

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return ops::rotary(x, cos, sin);
}

std::pair<torch::Tensor, torch::Tensor> rotary_table(const std::vector<double>& inv_freq, double attention_factor,
                                                     int64_t offset, int64_t T, torch::TensorOptions opt) {
  // As HF: frequencies in float32, angles = position · ω in float32, then cos/sin · attention factor.
  auto f = torch::tensor(inv_freq, torch::kDouble).to(torch::kFloat).to(opt.device());
  auto pos = torch::arange(offset, offset + T, torch::TensorOptions().dtype(torch::kFloat).device(opt.device()));
  auto ang = torch::outer(pos, f);                // (T, D/2)
  auto emb = torch::cat({ang, ang}, -1);          // (T, D)
  auto cos = (emb.cos() * attention_factor).to(opt.dtype());
  auto sin = (emb.sin() * attention_factor).to(opt.dtype());
  return {cos, sin};
}

}  // namespace drope
