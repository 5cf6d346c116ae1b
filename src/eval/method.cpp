#include "drope/eval/method.h"

#include <filesystem>

#include <fmt/format.h>
#include <torch/torch.h>

#include "drope/core/error.h"
#include "drope/formats/gguf.h"
#include "drope/io/model_io.h"

namespace drope::eval {

namespace fs = std::filesystem;

EvalModel load_eval_model(const MethodSpec& m, bool need_tokenizer) {
  if (m.threads < 0) fail("--threads must be >= 0, got {}", m.threads);
  if (m.threads > 0) torch::set_num_threads(m.threads);
  validate_variant(m.variant, "method " + m.variant.str());
  EvalModel em;
  em.variant = m.variant;
  auto base = io::load_model(m.model_dir);
  em.model = apply_variant(base, m.variant, m.model_dir);
  em.model->eval();
  const auto& cfg = em.model->config();
  em.train_length = cfg.max_position;
  em.temperature = cfg.softmax_temperature;
  if (!m.label.empty()) {
    em.label = m.label;
  } else {
    em.label = fs::path(m.model_dir).filename().string();
    if (em.label.empty()) em.label = fs::path(m.model_dir).parent_path().filename().string();
    if (m.variant.scaling != RopeScalingType::kNone)
      em.label += fmt::format("+{}x{:g}", name_of(m.variant.scaling), m.variant.factor);
    if (m.variant.set_temperature) em.label += fmt::format("+T{:g}", em.temperature);
    if (m.variant.drop) {
      Variant dropped;
      dropped.drop = true;
      dropped.drop_options = m.variant.drop_options;
      em.label += "+" + dropped.str();
    }
  }
  if (need_tokenizer) load_eval_tokenizer(em, m);
  return em;
}

void load_eval_tokenizer(EvalModel& em, const MethodSpec& m) {
  const std::string tpath = m.tokenizer.empty() ? m.model_dir : m.tokenizer;
  const bool has = !m.tokenizer.empty() || gguf::is_gguf_path(tpath) ||
                   fs::exists(fs::path(tpath) / "tokenizer.json") || fs::exists(fs::path(tpath) / "tokenizer.model");
  if (!has) fail("the model at {} has no tokenizer (tokenizer.json or tokenizer.model); pass --tokenizer", m.model_dir);
  em.tokenizer = text::load_tokenizer(tpath);
  const int64_t vocab = em.model->config().vocab_size;
  if (em.tokenizer->vocab_size() > vocab)
    fail("tokenizer {} has {} ids but the model's vocabulary is {}", em.tokenizer->path(), em.tokenizer->vocab_size(),
         vocab);
}

nlohmann::json EvalModel::describe() const {
  const auto& c = model->config();
  return {{"label", label},
          {"variant", variant.str()},
          {"positional", c.positional.type},
          {"rope_scaling", c.positional.scaling.type},
          {"factor", c.positional.scaling.factor},
          {"train_length", train_length},
          {"temperature", temperature},
          {"qk_norm", c.qk_norm}};
}

}  // namespace drope::eval
