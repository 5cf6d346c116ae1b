// drope-train's long-context probes (eval/probe.h): drope-eval ppl's sliding windows and drope-eval niah's cells
// on the weights in memory.
#include "drope/eval/probe.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/eval/perplexity.h"
#include "drope/eval/runners.h"
#include "drope/text/shards.h"

namespace drope::eval {

namespace fs = std::filesystem;

LengthProbe::LengthProbe(ProbeOptions o, const std::string& dataset) : o_(std::move(o)) {
  if (!o_.lengths.empty()) {
    const auto index = text::read_index((fs::path(dataset) / "index.json").string());
    if (!index.splits.count("val"))
      fail("eval.lengths: the dataset {} has no val split to measure perplexity on", dataset);
    auto stream = text::TokenStream::open(dataset, "val");
    const int64_t n = std::min<int64_t>(stream->size(), o_.max_tokens);
    if (n < 2) fail("eval.lengths: the val split of {} has {} tokens; need at least 2", dataset, stream->size());
    std::vector<int64_t> buf(static_cast<size_t>(n));
    stream->read(0, n, buf.data());
    stream_.assign(buf.begin(), buf.end());
  }
  if (!o_.niah_lengths.empty()) {
    tokenizer_ = text::load_tokenizer(dataset);
    niah_task_ = tasks::parse_niah_tasks(o_.niah_task, "eval.niah_task").at(0);
    const auto& task = niah_task_;
    if (task.haystack == tasks::Haystack::essay) essay_ = tasks::load_essay(o_.haystack, "eval.niah_haystack");
    // A length too small for the task's prompt fails now, before any training step.
    tasks::NiahOptions nopt;
    nopt.max_new_tokens = o_.niah_max_new_tokens;
    const text::Tokenizer& tok = *tokenizer_;
    const tasks::TokenCounter counter = [&tok](const std::string& s) { return int64_t(tok.encode(s).size()); };
    for (int64_t L : o_.niah_lengths)
      tasks::make_niah_sample(task, L, o_.niah_seed, 0, essay_, counter, nopt, nullptr, "eval.niah_lengths");
  }
}

LengthProbe::~LengthProbe() = default;

ProbeReading LengthProbe::run(DecoderLM& model, const BlockRunner& runner) const {
  ProbeReading reading;
  nlohmann::json& out = reading.values;
  const bool was_training = model->is_training();
  model->eval();
  for (int64_t L : o_.lengths) {
    PerplexityOptions p;
    p.length = L;
    p.stride = o_.stride;
    p.max_tokens = o_.max_tokens;
    p.block_runner = runner;
    out[fmt::format("ppl@{}", L)] = perplexity_sliding(model, stream_, p).ppl;
  }
  if (!o_.niah_lengths.empty()) {
    const auto& task = niah_task_;
    NiahCellOptions c;
    c.trials = o_.niah_trials;
    c.seed = o_.niah_seed;
    c.max_new_tokens = o_.niah_max_new_tokens;
    for (int64_t L : o_.niah_lengths) {
      const NiahCell cell = niah_cell(model, *tokenizer_, task, L, essay_, c);
      out[fmt::format("niah_{}@{}", task.name, L)] = cell.score;
      for (size_t i = 0; i < cell.samples.size(); ++i) {
        const auto& s = cell.samples[i];
        const nlohmann::json j = {{"task", s.task},
                                  {"length", s.length},
                                  {"trial", s.trial},
                                  {"prompt_tokens", s.prompt_tokens},
                                  {"expected", s.expected},
                                  {"output", cell.outputs[i]},
                                  {"finish", cell.generations[i].finish},
                                  {"score", cell.scores[i]}};
        reading.niah_samples += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      }
    }
  }
  if (was_training) model->train();
  return reading;
}

}  // namespace drope::eval
