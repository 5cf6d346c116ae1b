// Flags of `drope-data prepare` (text::prepare_dataset), its progress line and summary, and the error handling
// of every drope-data command.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <new>
#include <string_view>

#include <fmt/format.h>

#include "cli_numbers.h"
#include "data/commands.h"
#include "drope/core/cpu_budget.h"
#include "drope/core/duration.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/text/prepare.h"
#include "log_flags.h"

namespace drope::datacli {

int run(const std::function<int()>& body) {
  ignore_file_size_signal();
  try {
    app::apply_log_flags();
    return body();
  } catch (const std::bad_alloc&) {
    logging::error("out of memory: an allocation failed (an input is more than this machine can hold)");
  } catch (const std::exception& e) {
    logging::error("{}", e.what());
  }
  return 1;
}

namespace {

// Draws prepare's progress on stderr: on a terminal one line redrawn in place (at most 5 times a second),
// otherwise (forced with --progress) a plain line every 5 seconds; each phase ends with its final line.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool tty) : tty_(tty) {}

  void operator()(const text::PrepareProgress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (!p.done && now - last_ < std::chrono::milliseconds(tty_ ? 200 : 5000)) return;
    last_ = now;
    const double mb = static_cast<double>(p.text_bytes) / 1e6;
    const double rate = p.seconds > 0 ? mb / p.seconds : 0;
    std::string line;
    if (std::string_view(p.phase) == "scan") {
      line = fmt::format("scanning: {} documents, {:.1f} MB, {:.1f} MB/s, {}", p.documents, mb, rate,
                         format_duration(p.seconds));
    } else {
      const double frac =
          p.text_bytes_total > 0 ? static_cast<double>(p.text_bytes) / static_cast<double>(p.text_bytes_total) : 1.0;
      const int width = 24, filled = static_cast<int>(width * frac);
      const double eta = frac > 0 ? p.seconds * (1 - frac) / frac : -1;
      line = fmt::format("[{}{}] {:3.0f}% | {}/{} documents | {:.2f}M tokens | {:.1f} MB/s | {} {}",
                         std::string(filled, '#'), std::string(width - filled, '.'), 100 * frac, p.documents,
                         p.documents_total, static_cast<double>(p.tokens) / 1e6, rate, p.done ? "took" : "ETA",
                         format_duration(p.done ? p.seconds : eta));
    }
    logging::progress(line, stderr, p.done);
  }

 private:
  bool tty_;
  std::chrono::steady_clock::time_point last_{};
};

struct PrepareFlags {
  text::PrepareOptions po;
  bool train_tokenizer = false;
  bool progress = false;
  CLI::Option* progress_opt = nullptr;
};

int run_prepare(PrepareFlags& f) {
  auto& po = f.po;
  if (f.train_tokenizer && po.train_vocab_size <= 0) fail("--train-tokenizer needs --vocab-size N");
  if (!f.train_tokenizer && po.train_vocab_size > 0) fail("--vocab-size is only used with --train-tokenizer");
  if (f.train_tokenizer && !po.tokenizer.empty()) fail("give either --tokenizer PATH or --train-tokenizer, not both");
  if (!f.train_tokenizer && po.tokenizer.empty()) fail("give --tokenizer PATH or --train-tokenizer --vocab-size N");
  app::check_size_flag("--threads", po.threads, 1, app::kMaxThreadsFlag);
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  const bool show = f.progress_opt->count() > 0 ? f.progress : tty;
  ProgressPrinter printer(tty);
  text::PrepareProgress last;  // the tokenize phase's final report, for the summary
  po.progress = [&](const text::PrepareProgress& p) {
    if (p.done && p.documents_total > 0) last = p;
    if (show) printer(p);
  };
  const auto index = text::prepare_dataset(po);
  const auto& tr = index.splits.at("train");
  const auto& va = index.splits.at("val");
  logging::info("{}: {} tokenizer, vocab {} (eos {}), {} tokens", po.out_dir, index.tokenizer.kind,
                index.tokenizer.vocab_size, index.tokenizer.eos_id, index.token_bytes == 2 ? "uint16" : "uint32");
  logging::info("train: {} documents, {} tokens, {} shards", tr.documents, tr.tokens, tr.shards.size());
  logging::info("val:   {} documents, {} tokens, {} shards", va.documents, va.tokens, va.shards.size());
  logging::info("tokenised {:.1f} MB in {:.3f} s ({:.2f} MB/s, {} threads)", static_cast<double>(last.text_bytes) / 1e6,
                last.seconds, last.seconds > 0 ? static_cast<double>(last.text_bytes) / 1e6 / last.seconds : 0.0,
                po.threads);
  return 0;
}

}  // namespace

void add_prepare_command(CLI::App& cli, int& rc) {
  auto f = std::make_shared<PrepareFlags>();
  auto& po = f->po;
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
  po.threads = cpu_budget().threads;
  prepare
      ->add_option("--threads", po.threads,
                   "Tokenisation threads (the shards are the same for any count); "
                   "default: the CPUs this process may use")
      ->capture_default_str();
  f->progress_opt = prepare->add_flag("--progress,!--no-progress", f->progress,
                                      "Progress on stderr (default: only when stderr is a terminal)");
  prepare->add_option("--out", po.out_dir, "Dataset directory to write")->required();
  prepare->add_option("--tokenizer", po.tokenizer,
                      "Existing tokenizer: SentencePiece .model, tokenizer.json, or a directory");
  prepare->add_flag("--train-tokenizer", f->train_tokenizer, "Train a SentencePiece model on the training documents");
  prepare->add_option("--vocab-size", po.train_vocab_size, "Vocabulary size of the trained SentencePiece model");
  prepare->add_option("--model-type", po.train_model_type, "SentencePiece model type")
      ->check(CLI::IsMember({"bpe", "unigram"}));
  prepare->add_option("--val-fraction", po.val_fraction, "Share of documents held out for validation, in [0, 1)");
  prepare->add_option("--seed", po.seed, "Seed of the validation split");
  prepare->add_option("--shard-tokens", po.shard_tokens, "Tokens per shard file at most");
  prepare->add_flag("--paragraphs", po.paragraphs, "Text files: one document per blank-line-separated paragraph");
  prepare->callback([f, &rc] { rc = run([&] { return run_prepare(*f); }); });
}

}  // namespace drope::datacli
