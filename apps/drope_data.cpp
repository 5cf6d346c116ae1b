// drope-data: prepare token shards from text / JSON Lines (plain, .gz, .zst) / parquet, and encode/decode
// with a tokenizer. Torch-free, so it starts instantly and runs where LibTorch is not installed.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <new>
#include <string_view>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "drope/core/cpu_budget.h"
#include "drope/core/duration.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/core/log.h"
#include "drope/text/prepare.h"
#include "drope/text/tokenizer.h"

#include "cli_numbers.h"
#include "log_flags.h"

namespace {

using json = nlohmann::json;

json parse_json_file(const std::string& path) { return drope::read_json_file(path); }

// A JSON list of token ids → ids, naming the file and index on a bad entry.
std::vector<int32_t> ids_from(const json& j, const std::string& where) {
  if (!j.is_array()) drope::fail("{}: expected a list of token ids", where);
  std::vector<int32_t> ids;
  for (size_t i = 0; i < j.size(); ++i) {
    const int64_t id = drope::json_int64(j[i], fmt::format("{}[{}]: token id", where, i));
    if (id < 0 || id > INT32_MAX) drope::fail("{}[{}]: expected a non-negative integer token id, got {}", where, i, id);
    ids.push_back(static_cast<int32_t>(id));
  }
  return ids;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Runs `body`; an error prints one "error: ..." line and exits 1 (drope::app::run without LibTorch). The
// logger clears a progress line that the error interrupted.
int run(const std::function<int()>& body) {
  drope::ignore_file_size_signal();
  try {
    drope::app::apply_log_flags();
    return body();
  } catch (const std::bad_alloc&) {
    drope::logging::error("out of memory: an allocation failed (an input is more than this machine can hold)");
  } catch (const std::exception& e) {
    drope::logging::error("{}", e.what());
  }
  return 1;
}

// Draws prepare's progress on stderr: on a terminal one line redrawn in place (at most 5 times a second),
// otherwise (forced with --progress) a plain line every 5 seconds; each phase ends with its final line.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool tty) : tty_(tty) {}

  void operator()(const drope::text::PrepareProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (!p.done && now - last_ < std::chrono::milliseconds(tty_ ? 200 : 5000)) return;
    last_ = now;
    const double mb = static_cast<double>(p.text_bytes) / 1e6;
    const double rate = p.seconds > 0 ? mb / p.seconds : 0;
    std::string line;
    if (std::string_view(p.phase) == "scan") {
      line = fmt::format("scanning: {} documents, {:.1f} MB, {:.1f} MB/s, {}", p.documents, mb, rate,
                         drope::format_duration(p.seconds));
    } else {
      const double frac =
          p.text_bytes_total > 0 ? static_cast<double>(p.text_bytes) / static_cast<double>(p.text_bytes_total) : 1.0;
      const int width = 24, filled = static_cast<int>(width * frac);
      const double eta = frac > 0 ? p.seconds * (1 - frac) / frac : -1;
      line = fmt::format("[{}{}] {:3.0f}% | {}/{} documents | {:.2f}M tokens | {:.1f} MB/s | {} {}",
                         std::string(filled, '#'), std::string(width - filled, '.'), 100 * frac, p.documents,
                         p.documents_total, static_cast<double>(p.tokens) / 1e6, rate, p.done ? "took" : "ETA",
                         drope::format_duration(p.done ? p.seconds : eta));
    }
    drope::logging::progress(line, stderr, p.done);
  }

 private:
  bool tty_;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App cli{"drope-data: token shards for training, and tokenizer encode/decode"};
  cli.require_subcommand(1);

  drope::text::PrepareOptions po;
  bool train_tokenizer = false;
  bool progress = false;
  auto* prepare =
      cli.add_subcommand("prepare", "Text / JSON Lines / parquet files → tokenizer → train/val token shards "
                                    "+ index.json");
  prepare
      ->add_option("--input,-i", po.inputs,
                   "Text files (one document each), JSON Lines files (.jsonl, .jsonl.gz, "
                   ".jsonl.zst: one document per line), parquet files (.parquet: one "
                   "per row), or directories of them (sorted)")
      ->required();
  prepare->add_option("--text-column", po.text_field, "JSON Lines field / parquet column holding the text")
      ->capture_default_str();
  po.threads = drope::cpu_budget().threads;
  prepare
      ->add_option("--threads", po.threads,
                   "Tokenisation threads (the shards are the same for any count); "
                   "default: the CPUs this process may use")
      ->capture_default_str();
  auto* progress_opt = prepare->add_flag("--progress,!--no-progress", progress,
                                         "Progress on stderr (default: only when stderr is a terminal)");
  prepare->add_option("--out", po.out_dir, "Dataset directory to write")->required();
  prepare->add_option("--tokenizer", po.tokenizer,
                      "Existing tokenizer: SentencePiece .model, tokenizer.json, or a directory");
  prepare->add_flag("--train-tokenizer", train_tokenizer, "Train a SentencePiece model on the training documents");
  prepare->add_option("--vocab-size", po.train_vocab_size, "Vocabulary size of the trained SentencePiece model");
  prepare->add_option("--model-type", po.train_model_type, "SentencePiece model type")
      ->check(CLI::IsMember({"bpe", "unigram"}));
  prepare->add_option("--val-fraction", po.val_fraction, "Share of documents held out for validation, in [0, 1)");
  prepare->add_option("--seed", po.seed, "Seed of the validation split");
  prepare->add_option("--shard-tokens", po.shard_tokens, "Tokens per shard file at most");
  prepare->add_flag("--paragraphs", po.paragraphs, "Text files: one document per blank-line-separated paragraph");

  std::string tokenizer, text_file, texts_file, ids_file;
  bool skip_special = false;
  auto* encode = cli.add_subcommand("encode", "Print the token ids of a text as JSON");
  encode->add_option("--tokenizer", tokenizer, "SentencePiece .model, tokenizer.json, or a directory")->required();
  auto* text_opt = encode->add_option("--text", text_file, "UTF-8 file whose whole content is encoded → [ids]");
  auto* texts_opt = encode->add_option("--texts", texts_file, "JSON list of strings → [[ids], ...]");
  text_opt->excludes(texts_opt);

  auto* decode = cli.add_subcommand("decode", "Print the text of token ids as JSON");
  decode->add_option("--tokenizer", tokenizer, "SentencePiece .model, tokenizer.json, or a directory")->required();
  decode->add_option("--ids", ids_file, "JSON list of ids → \"text\", or list of lists → [\"text\", ...]")->required();
  decode->add_flag("--skip-special", skip_special, "Leave special tokens out");

  drope::app::add_log_flags(cli, "drope-data");
  drope::app::check_numeric_flags(cli);

  CLI11_PARSE(cli, argc, argv);
  return run([&] {
    if (*prepare) {
      if (train_tokenizer && po.train_vocab_size <= 0) drope::fail("--train-tokenizer needs --vocab-size N");
      if (!train_tokenizer && po.train_vocab_size > 0) drope::fail("--vocab-size is only used with --train-tokenizer");
      if (train_tokenizer && !po.tokenizer.empty())
        drope::fail("give either --tokenizer PATH or --train-tokenizer, not both");
      if (!train_tokenizer && po.tokenizer.empty())
        drope::fail("give --tokenizer PATH or --train-tokenizer --vocab-size N");
      drope::app::check_size_flag("--threads", po.threads, 1, 1024);
      const bool tty = ::isatty(STDERR_FILENO) == 1;
      const bool show = progress_opt->count() > 0 ? progress : tty;
      ProgressPrinter printer(tty);
      drope::text::PrepareProgress last;  // the tokenize phase's final report, for the summary
      po.progress = [&](const drope::text::PrepareProgress& p) {
        if (p.done && p.documents_total > 0) last = p;
        if (show) printer(p);
      };
      const auto index = drope::text::prepare_dataset(po);
      const auto& tr = index.splits.at("train");
      const auto& va = index.splits.at("val");
      drope::logging::info("{}: {} tokenizer, vocab {} (eos {}), {} tokens", po.out_dir, index.tokenizer.kind,
                           index.tokenizer.vocab_size, index.tokenizer.eos_id,
                           index.token_bytes == 2 ? "uint16" : "uint32");
      drope::logging::info("train: {} documents, {} tokens, {} shards", tr.documents, tr.tokens, tr.shards.size());
      drope::logging::info("val:   {} documents, {} tokens, {} shards", va.documents, va.tokens, va.shards.size());
      drope::logging::info(
          "tokenised {:.1f} MB in {:.3f} s ({:.2f} MB/s, {} threads)", static_cast<double>(last.text_bytes) / 1e6,
          last.seconds, last.seconds > 0 ? static_cast<double>(last.text_bytes) / 1e6 / last.seconds : 0.0, po.threads);
    } else if (*encode) {
      const auto tok = drope::text::load_tokenizer(tokenizer);
      if (!texts_file.empty()) {
        const json texts = parse_json_file(texts_file);
        if (!texts.is_array()) drope::fail("{}: expected a JSON list of strings", texts_file);
        json out = json::array();
        for (size_t i = 0; i < texts.size(); ++i) {
          if (!texts[i].is_string()) drope::fail("{}[{}]: expected a string", texts_file, i);
          try {
            out.push_back(tok->encode(texts[i].get<std::string>()));
          } catch (const drope::Error& e) {
            drope::fail("{}[{}]: {}", texts_file, i, e.what());
          }
        }
        fmt::print("{}\n", dump(out));
      } else {
        if (text_file.empty()) drope::fail("give --text FILE or --texts FILE.json");
        const std::string text = drope::read_file(text_file);
        std::vector<int32_t> ids;
        try {
          ids = tok->encode(text);
        } catch (const drope::Error& e) {
          drope::fail("{}: {}", text_file, e.what());
        }
        fmt::print("{}\n", dump(json(ids)));
      }
    } else if (*decode) {
      const auto tok = drope::text::load_tokenizer(tokenizer);
      const json j = parse_json_file(ids_file);
      auto decode_one = [&](const json& list, const std::string& where) {
        const auto ids = ids_from(list, where);
        try {
          return tok->decode(ids, skip_special);
        } catch (const drope::Error& e) {
          drope::fail("{}: {}", where, e.what());
        }
      };
      if (j.is_array() && !j.empty() && j[0].is_array()) {
        json out = json::array();
        for (size_t i = 0; i < j.size(); ++i) out.push_back(decode_one(j[i], fmt::format("{}[{}]", ids_file, i)));
        fmt::print("{}\n", dump(out));
      } else {
        fmt::print("{}\n", dump(json(decode_one(j, ids_file))));
      }
    }
    return 0;
  });
}
