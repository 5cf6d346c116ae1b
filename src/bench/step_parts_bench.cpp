// drope-bench step-parts (bench/runners.h): the two parts of a training step that drope-train can run fused or as
// separate ops, timed alternately on the same inputs so that a drifting machine slows both paths alike.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "drope/bench/runners.h"
#include "drope/config/model_config.h"
#include "drope/core/cpu_budget.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/model/transformer.h"
#include "drope/ops/loss.h"
#include "drope/train/adamw.h"
#include "round_robin.h"

namespace drope::bench {
void run_step_parts(const StepPartsRun& r) {
  if (r.rows < 1 || r.repeats < 1) fail("drope-bench step-parts: --rows and --repeats must be >= 1");
  const ModelConfig cfg = model_preset(r.preset);  // names the presets when `preset` is unknown
  const int64_t V = cfg.vocab_size, C = cfg.hidden_size, N = r.rows;
  // The parameters, their gradients and AdamW's two moments; the materialised baseline's logits and their
  // gradient; the hidden rows and their gradient (float32). Checked before the model is built.
  check_memory_estimate(4.0 * (4.0 * cfg.parameter_count() + 2.0 * double(N) * double(V) + 4.0 * double(N) * double(C)),
                        "drope-bench step-parts with these sizes", "use a smaller --rows or --preset");
  if (r.threads > 0) at::set_num_threads(r.threads);
  torch::manual_seed(0);
  DecoderLM model(cfg);
  int64_t n_params = 0;
  for (const auto& p : model->parameters()) n_params += p.numel();
  nlohmann::json out = {{"preset", r.preset},  {"rows", N},          {"hidden", C},
                        {"vocab", V},          {"params", n_params}, {"threads", at::get_num_threads()},
                        {"repeats", r.repeats}};
  fmt::print("{} ({:.1f}M parameters), vocab {}, hidden {}, {} rows, float32, {} threads; median of {} "
             "alternating runs (ms)\n",
             r.preset, double(n_params) / 1e6, V, C, N, at::get_num_threads(), r.repeats);

  // The LM head's loss, forward and backward: fused chunks, the same chunks in separate passes, and what an
  // eager PyTorch model runs (the whole (N, V) logits, then cross_entropy).
  auto h = (torch::randn({N, C}) * 0.5).requires_grad_(true);
  auto w = (torch::randn({V, C}) * 0.02).requires_grad_(true);
  auto y = torch::randint(0, V, {N}, torch::kLong);
  auto chunked = [&](bool fused) {
    auto loss = ops::linear_cross_entropy(h, w, y, -100, 0, fused);
    torch::autograd::grad({loss}, {h, w});
  };
  const auto loss_ms = median_ms_round_robin(r.repeats, {[&] { chunked(true); }, [&] { chunked(false); },
                                                         [&] {
                                                           auto loss = at::cross_entropy_loss(h.matmul(w.t()), y);
                                                           torch::autograd::grad({loss}, {h, w});
                                                         }});
  fmt::print("| part | fused | separate ops | speed-up | materialised logits (eager PyTorch) | fused vs it |\n"
             "|---|---:|---:|---:|---:|---:|\n");
  fmt::print("| LM-head loss fwd+bwd | {:.2f} | {:.2f} | {:.2f}x | {:.2f} | {:.2f}x |\n", loss_ms[0], loss_ms[1],
             loss_ms[1] / loss_ms[0], loss_ms[2], loss_ms[2] / loss_ms[0]);
  out["loss_ms"] = {{"fused", loss_ms[0]}, {"separate", loss_ms[1]}, {"materialised", loss_ms[2]}};
  h = torch::Tensor(), w = torch::Tensor();

  // The AdamW update over every parameter of the model, gradients fixed: LibTorch's fused kernel against the
  // separate-ops update (the same arithmetic: tests/test_trainer.cpp).
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& kv : model->named_parameters()) {
    kv.value().mutable_grad() = torch::randn_like(kv.value()) * 1e-3;
    named.emplace_back(kv.key(), kv.value());
  }
  train::AdamW opt(named, train::AdamWConfig{});
  const auto adam_ms = median_ms_round_robin(r.repeats, {[&] {
                                                           opt.set_force_unfused(false);
                                                           opt.step(1e-4);
                                                         },
                                                         [&] {
                                                           opt.set_force_unfused(true);
                                                           opt.step(1e-4);
                                                         }});
  fmt::print("| AdamW update | {:.2f} | {:.2f} | {:.2f}x | - | - |\n", adam_ms[0], adam_ms[1], adam_ms[1] / adam_ms[0]);
  out["adamw_ms"] = {{"fused", adam_ms[0]}, {"separate", adam_ms[1]}};
  if (!r.json.empty()) write_file_atomic(r.json, out.dump(2) + "\n");
}

}  // namespace drope::bench
