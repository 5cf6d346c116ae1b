// drope-eval offset-key: the offset-key retrieval task (tasks/offset_key.h) scored per length.
#include "drope/eval/offset_key.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <torch/torch.h>

#include "drope/core/error.h"
#include "drope/core/log.h"
#include "drope/eval/perplexity.h"
#include "drope/eval/results.h"
#include "drope/eval/runners.h"
#include "drope/plot/plot.h"
#include "drope/tasks/offset_key.h"
#include "drope/tasks/report.h"

namespace drope::eval {

namespace {

// Argmax predictions at the answer positions of `seqs` (cropped to crop_context when > 0), one per query.
std::vector<std::vector<int64_t>> predict(DecoderLM& model, const std::vector<tasks::OffsetKeySequence>& seqs,
                                          int64_t crop_context) {
  auto best = offset_key_answer_logits(model, seqs, crop_context).to(torch::kFloat).argmax(-1).contiguous();
  const int64_t B = best.size(0), Q = best.size(1);
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  const int64_t* p = best.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) out[size_t(b)].assign(p + b * Q, p + (b + 1) * Q);
  return out;
}

double percent(double fraction) { return 100.0 * fraction; }

// --split: the index split drope-eval offset-key scores.
tasks::OffsetKeySplit parse_split(const std::string& name) {
  if (name == "test") return tasks::OffsetKeySplit::test;
  if (name == "heldout") return tasks::OffsetKeySplit::heldout;
  fail("--split: expected heldout or test, got '{}'", name);
}

}  // namespace

torch::Tensor offset_key_answer_logits(DecoderLM& model, const std::vector<tasks::OffsetKeySequence>& seqs,
                                       int64_t crop_context) {
  if (seqs.empty()) fail("offset-key: no sequences to score");
  const int64_t B = int64_t(seqs.size());
  std::vector<int64_t> ids, pos;
  int64_t L = -1, Q = -1;
  for (const auto& full : seqs) {
    const auto s = crop_context > 0 ? tasks::crop_offset_key_sequence(full, crop_context) : full;
    if (L < 0) L = int64_t(s.tokens.size()), Q = int64_t(s.answer_positions.size());
    if (int64_t(s.tokens.size()) != L || int64_t(s.answer_positions.size()) != Q)
      fail("offset-key: the sequences of one batch must have the same length and number of queries");
    ids.insert(ids.end(), s.tokens.begin(), s.tokens.end());
    pos.insert(pos.end(), s.answer_positions.begin(), s.answer_positions.end());
  }
  torch::NoGradGuard no_grad;
  auto h = model->hidden(torch::tensor(ids, torch::kLong).view({B, L}));  // (B, L, C)
  auto at = torch::tensor(pos, torch::kLong).view({B, Q, 1}).expand({B, Q, h.size(2)});
  return torch::matmul(h.gather(1, at), model->lm_head_weight().t());  // (B, Q, V)
}

double offset_key_answer_nll(DecoderLM& model, uint64_t seed, int64_t length, int64_t sequences, int64_t batch) {
  if (sequences <= 0 || batch <= 0)
    fail("offset-key: need sequences > 0 and batch > 0, got {} and {}", sequences, batch);
  tasks::check_offset_key_length(length, "offset-key held-out length");
  torch::NoGradGuard no_grad;
  double nll = 0;
  int64_t answers = 0;
  for (int64_t first = 0; first < sequences; first += batch) {
    const int64_t B = std::min(batch, sequences - first);
    std::vector<tasks::OffsetKeySequence> seqs;
    std::vector<int64_t> target;
    for (int64_t i = 0; i < B; ++i) {
      seqs.push_back(tasks::make_offset_key_sequence(
          seed, tasks::offset_key_index(tasks::OffsetKeySplit::heldout, uint64_t(first + i)), length));
      target.insert(target.end(), seqs.back().answers.begin(), seqs.back().answers.end());
    }
    const int64_t Q = int64_t(target.size()) / B;
    auto logits = offset_key_answer_logits(model, seqs).to(torch::kDouble).view({B * Q, -1});
    nll += torch::nn::functional::cross_entropy(logits, torch::tensor(target, torch::kLong),
                                                torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
               .item<double>();
    answers += B * Q;
  }
  return nll / double(answers);
}

namespace {
// The crop keeps a positional model inside the context it was trained at; a model without positions has no such
// context (every length reads the same weights the same way), so the baseline would measure nothing.
void check_crop_has_positions(const EvalModel& em, const std::string& model_dir) {
  const auto plan = em.model->config().layer_plan();
  if (std::all_of(plan.begin(), plan.end(), [](const LayerPositional& l) { return l.kind == PositionalKind::kNope; }))
    fail("--crop: --model {} has no positional encoding (NoPE in every layer); the cropped-context baseline is "
         "for a model with positions, kept inside its training length",
         model_dir);
}
}  // namespace

void run_offset_key(const OffsetKeyRun& r) {
  if (r.queries <= 0 || r.queries > kMaxQueries)
    fail("--queries: expected an integer in [1, {}], got {}", kMaxQueries, r.queries);
  if (r.batch <= 0 || r.batch > kMaxQueries)
    fail("--batch-size: expected an integer in [1, {}], got {}", kMaxQueries, r.batch);
  if (r.far_threshold < 0) fail("--far-threshold must be >= 0 (0 = the training length), got {}", r.far_threshold);
  const tasks::OffsetKeySplit split = parse_split(r.split);
  for (auto L : r.lengths) tasks::check_offset_key_length(L, "--lengths");
  const Variant& v = r.method.variant;
  if (r.crop && (v.scaling != RopeScalingType::kNone || v.set_temperature || v.drop))
    fail("--crop: the cropped-context baseline is the model as it is; it takes no --rope-scaling, --factor, "
         "--temperature or DroPE (method {})",
         v.str());
  auto em = load_eval_model(r.method, false);
  if (r.crop && r.method.label.empty()) em.label += "+crop";
  if (r.crop) check_crop_has_positions(em, r.method.model_dir);
  tasks::check_offset_key_vocab(em.model->config().vocab_size, "--model " + r.method.model_dir);
  const auto lengths = resolve_lengths(r.lengths, r.multipliers, em.train_length);
  for (auto L : lengths) tasks::check_offset_key_length(L, r.lengths.empty() ? "--multipliers" : "--lengths");
  const int64_t far = r.far_threshold > 0 ? r.far_threshold : em.train_length;
  const int64_t per_seq = tasks::OffsetKeyVocab::kColours;
  const int64_t sequences = (r.queries + per_seq - 1) / per_seq;
  const int64_t crop_context = r.crop ? em.train_length : 0;  // the crop's window: C tokens
  if (r.crop) tasks::check_offset_key_length(crop_context, "--crop at the training length");
  for (auto L : lengths) {
    const int64_t read = r.crop ? std::min(L, crop_context) : L;
    check_fits_in_memory(em.model->config(), read, read, std::min(r.batch, sequences),
                         fmt::format("offset-key at length {}", L));
  }

  nlohmann::json results = nlohmann::json::array(), summary = nlohmann::json::object();
  tasks::Table table;
  table.title = fmt::format("Offset-key retrieval — {}{} (far: distance > {})", em.label,
                            r.crop ? fmt::format(", reading BOS + the last {} tokens", crop_context - 1) : "", far);
  table.columns = {"method", "length", "x train", "accuracy %", "far accuracy %", "queries", "far queries"};
  plot::Series all, far_curve;
  all.label = "all needles";
  far_curve.label = fmt::format("far needles (> {})", far);
  for (auto L : lengths) {
    tasks::OffsetKeyScore score;
    for (int64_t first = 0; first < sequences; first += r.batch) {
      const int64_t n = std::min(r.batch, sequences - first);
      std::vector<tasks::OffsetKeySequence> seqs;
      for (int64_t i = 0; i < n; ++i)
        seqs.push_back(tasks::make_offset_key_sequence(r.seed, tasks::offset_key_index(split, uint64_t(first + i)), L));
      const auto preds = predict(em.model, seqs, crop_context);
      for (int64_t i = 0; i < n; ++i) score += tasks::score_offset_key(seqs[size_t(i)], preds[size_t(i)], far);
    }
    const double acc = percent(score.accuracy()), far_acc = percent(score.far_accuracy());
    const bool has_far = score.far_queries > 0;
    logging::info("{}  L={}  accuracy {:.2f}%  far {}  ({} queries, {} far)", em.label, L, acc,
                  has_far ? fmt::format("{:.2f}%", far_acc) : "-", score.queries, score.far_queries);
    results.push_back({{"length", L},
                       {"accuracy", acc},
                       {"far_accuracy", has_far ? nlohmann::json(far_acc) : nlohmann::json(nullptr)},
                       {"queries", score.queries},
                       {"far_queries", score.far_queries},
                       {"correct", score.correct},
                       {"far_correct", score.far_correct}});
    summary[fmt::format("acc@{}", L)] = acc;
    if (has_far) summary[fmt::format("far@{}", L)] = far_acc;
    table.add_row({em.label, std::to_string(L), tasks::fixed(double(L) / double(em.train_length), 2),
                   tasks::fixed(acc, 2), has_far ? tasks::fixed(far_acc, 2) : "-", std::to_string(score.queries),
                   std::to_string(score.far_queries)});
    all.x.push_back(double(L));
    all.y.push_back(acc);
    if (has_far) far_curve.x.push_back(double(L)), far_curve.y.push_back(far_acc);
  }
  nlohmann::json doc = new_results("offset-key");
  doc.update({{"method", em.describe()},
              {"seed", r.seed},
              {"far_threshold", far},
              {"train_length", em.train_length},
              {"index_split", r.split},
              {"crop", r.crop},
              {"results", results},
              {"summary", summary}});
  plot::Figure fig;
  plot::Panel panel;
  panel.title = fmt::format("Offset-key retrieval — {}", em.label);
  panel.xlabel = "sequence length (tokens)";
  panel.ylabel = "accuracy (%)";
  panel.y_min = 0;
  panel.y_max = 100;
  panel.series = {all};
  if (!far_curve.x.empty()) panel.series.push_back(far_curve);
  const double C = double(em.train_length), chance = 100.0 / double(tasks::OffsetKeyVocab::kValuesPerColour);
  panel.series.push_back(plot::guide_line("train length", {C, C}, {0, 100}));
  panel.series.push_back(plot::guide_line("chance within a colour", {all.x.front(), all.x.back()}, {chance, chance}));
  fig.panels.push_back(panel);
  plot::save(fig, r.out + ".png");
  plot::save(fig, r.out + ".svg");
  for (const auto& p : write_results(r.out, doc, table)) logging::info("wrote {}", p);
  logging::info("wrote {}.png and {}.svg", r.out, r.out);
}

}  // namespace drope::eval
