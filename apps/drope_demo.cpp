// drope-demo: the embedded end-to-end DroPE pipeline on this machine's own prose (byte-level tokens):
// pretrain a tiny RoPE model at context C, drop its positional embeddings, recalibrate briefly, and
// compare perplexity at C, 2C and 4C against RoPE with PI / NTK / YaRN scaling.
#include <chrono>
#include <filesystem>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app_common.h"
#include "cli_numbers.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/io/model_io.h"
#include "drope/model/drope.h"
#include "drope/train/data.h"
#include "drope/train/quick.h"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App cli{"drope-demo: pretrain RoPE → DroPE → recalibrate → perplexity vs length, in minutes on a CPU"};
  std::string corpus = "/usr/share/common-licenses", out = "runs/quickstart";
  int64_t context = 64, steps = 1200, recal_steps = 600, threads = 0;
  cli.add_option("--corpus", corpus, "Text file or directory (byte-level tokens)");
  cli.add_option("--out", out, "Run directory for models and results");
  cli.add_option("--context", context, "Training context C")->check(CLI::Range(8, 4096));
  cli.add_option("--steps", steps, "Pretraining steps")->check(CLI::Range(1, 1000000));
  cli.add_option("--recal-steps", recal_steps, "DroPE recalibration steps")->check(CLI::Range(1, 1000000));
  cli.add_option("--threads", threads, "Intra-op threads (0 = all cores)")->check(CLI::Range(0, 1024));
  drope::app::check_numeric_flags(cli);
  CLI11_PARSE(cli, argc, argv);
  // The trained RoPE model's weights with an evaluation-time scaling method.
  auto scaled = [](drope::DecoderLM& base, const std::string& type, double factor) {
    drope::RopeScalingConfig s;
    s.type = type;
    s.factor = factor;
    return drope::with_rope_scaling(base, s);
  };
  return drope::app::run([&] {
    if (threads > 0) torch::set_num_threads(threads);
    auto t0 = std::chrono::steady_clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    auto tokens = drope::train::read_byte_corpus(corpus);
    if (tokens.size() < 20000) drope::fail("{}: corpus has {} bytes; the demo needs at least 20000", corpus, tokens.size());
    const size_t split = tokens.size() * 9 / 10;
    std::vector<int64_t> train_tokens(tokens.begin(), tokens.begin() + split), val(tokens.begin() + split, tokens.end());
    fmt::print("corpus {}: {} bytes ({} train / {} validation), byte-level vocab 256\n", corpus, tokens.size(),
               train_tokens.size(), val.size());
    fmt::print("unigram entropy of the training bytes: {:.3f} nats\n", drope::train::unigram_entropy(train_tokens, 256));

    auto cfg = drope::model_preset("tiny");
    cfg.vocab_size = 256;
    cfg.max_position = context;
    drope::DecoderLM rope(cfg);
    rope->reset_parameters(0);
    fmt::print("model: {} layers, hidden {}, {} heads ({} kv), {:.2f}M parameters, context C = {}\n", cfg.num_layers,
               cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, rope->num_parameters() / 1e6, context);
    auto log = [&](const char* phase, int64_t total) {
      return [=, &elapsed](int64_t step, double loss, double lr, double gnorm) {
        if ((step + 1) % 25 == 0 || step == 0 || step + 1 == total)
          fmt::print("[{}] step {:4d}/{}  loss {:.4f}  lr {:.2e}  grad-norm {:.3f}  {:.0f}s\n", phase, step + 1, total, loss,
                     lr, gnorm, elapsed());
        std::fflush(stdout);
      };
    };
    drope::train::QuickTrainOptions opt;
    opt.steps = steps;
    opt.seq_len = context;
    opt.warmup = std::max<int64_t>(1, steps / 10);
    drope::train::train_lm(rope, train_tokens, opt, log("pretrain RoPE", steps));

    drope::DecoderLM dropped = drope::drop_positional(rope, {"qk", false});
    auto recal = opt;
    recal.steps = recal_steps;
    recal.warmup = std::max<int64_t>(1, recal_steps / 10);
    recal.seed = 1;
    drope::train::train_lm(dropped, train_tokens, recal, log("DroPE recalibrate", recal_steps));

    const std::vector<int64_t> lengths = {context, 2 * context, 4 * context};
    struct Method {
      std::string name;
      std::function<drope::DecoderLM(int64_t)> at;  // model for evaluation length L
    };
    std::vector<Method> methods = {
        {"RoPE", [&](int64_t) { return rope; }},
        {"RoPE+PI", [&](int64_t L) { return scaled(rope, "pi", std::max(1.0, double(L) / context)); }},
        {"RoPE+NTK", [&](int64_t L) { return scaled(rope, "ntk", std::max(1.0, double(L) / context)); }},
        {"RoPE+YaRN", [&](int64_t L) { return scaled(rope, "yarn", std::max(1.0, double(L) / context)); }},
        {"DroPE", [&](int64_t) { return dropped; }},
    };
    nlohmann::json results = nlohmann::json::array();
    std::string md = "| method |";
    for (auto L : lengths) md += fmt::format(" ppl @ {} ({}C) |", L, L / context);
    md += "\n|---|";
    for (size_t i = 0; i < lengths.size(); ++i) md += "---|";
    md += "\n";
    for (auto& m : methods) {
      md += "| " + m.name + " |";
      for (auto L : lengths) {
        auto model = m.at(L);
        const double ppl = drope::train::perplexity(model, val, L, 8);
        results.push_back({{"method", m.name}, {"length", L}, {"ppl", ppl}});
        md += fmt::format(" {:.3f} |", ppl);
      }
      md += "\n";
    }
    fmt::print("\nvalidation perplexity (bytes) vs evaluation length, trained at C = {}:\n\n{}\n", context, md);
    fs::create_directories(out);
    drope::write_file_atomic(out + "/results.json", results.dump(2) + "\n");
    drope::write_file_atomic(out + "/results.md", md);
    drope::io::save_model(rope, out + "/rope");
    drope::io::save_model(dropped, out + "/drope");
    fmt::print("wrote {}/results.json, results.md and the models rope/ and drope/ ({:.0f}s total)\n", out, elapsed());
    return 0;
  });
}
