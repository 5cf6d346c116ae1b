// Flags of `drope-analyze constant-seq`, `attention` and `head-scores`, which share the model selection
// (analyze::run_constant_seq, analyze::run_attention_map, analyze::run_head_scores).
#include <memory>

#include "analyze/commands.h"
#include "app_common.h"
#include "cli_numbers.h"
#include "drope/config/names.h"
#include "drope/core/error.h"

namespace drope::analyzecli {

namespace {

void add_model_options(CLI::App* sub, analyze::ModelChoice& m) {
  static const std::vector<std::string> kPositional = names_of<PositionalType>();
  sub->add_option("--model", m.dir, "Model directory");
  sub->add_option("--config", m.config, "Model YAML config (initialised with --seed)");
  sub->add_option("--preset", m.preset, "Preset name (default tiny), initialised with --seed");
  sub->add_option("--positional", m.positional, "Positional type for --preset")->check(CLI::IsMember(kPositional));
  sub->add_option("--seed", m.seed, "Initialisation seed for --config/--preset");
}

Inputs model_inputs(const analyze::ModelChoice& m) { return {{"--model", m.dir}, {"--config", m.config}}; }

}  // namespace

void add_model_commands(CLI::App& cli, int& rc) {
  auto csr = std::make_shared<analyze::ConstantSeqRun>();
  auto amr = std::make_shared<analyze::AttentionMapRun>();
  auto hsr = std::make_shared<analyze::HeadScoresRun>();
  auto* cs = cli.add_subcommand("constant-seq", "Proposition 3.1 on a sequence of one repeated token (float64)");
  auto* att = cli.add_subcommand("attention", "Heatmap of one head's attention map for a prompt");
  auto* hs = cli.add_subcommand("head-scores",
                                "Previous-token attention of every layer x head; on offset-key sequences also the "
                                "answer's attention to its query and needles");
  add_model_options(cs, csr->model);
  add_model_options(att, amr->model);
  add_model_options(hs, hsr->model);

  cs->add_option("--token", csr->token, "The repeated token id");
  cs->add_option("--seq-len", csr->seq_len, "Sequence length T");
  cs->add_option("--out", csr->out, "Directory for constant_seq.json");
  cs->callback([csr, &rc] {
    rc = app::run([&] {
      app::check_size_flag("--seq-len", csr->seq_len, 2, app::kMaxTokensFlag);
      const auto lock = claim_out(csr->out, model_inputs(csr->model));
      analyze::run_constant_seq(*csr);
      return 0;
    });
  });

  att->add_option("--text", amr->text, "Prompt as a text file (byte-level tokens)");
  att->add_option("--tokens", amr->tokens, "Prompt as a JSON list of token-id lists (the first is used)");
  att->add_option("--max-tokens", amr->max_tokens, "Use at most this many prompt tokens");
  att->add_option("--layer", amr->layer, "Layer index (0-based)")->required();
  att->add_option("--head", amr->head, "Query head index (0-based)")->required();
  att->add_flag("--log-color", amr->log_color, "Colour by log10(α)");
  att->add_option("--out", amr->out, "Output directory for attention_L<layer>_H<head>.{png,svg,json}")->required();
  att->callback([amr, &rc] {
    rc = app::run([&] {
      app::check_size_flag("--max-tokens", amr->max_tokens, 1, app::kMaxTokensFlag);
      Inputs in = model_inputs(amr->model);
      in.emplace_back("--text", amr->text);
      in.emplace_back("--tokens", amr->tokens);
      const auto lock = claim_out(amr->out, in);
      analyze::run_attention_map(*amr);
      return 0;
    });
  });

  hs->add_option("--tokens", hsr->tokens, "JSON list of equally long token-id lists (all are scored)");
  hs->add_option("--task", hsr->task, "offset-key: score the task's own sequences instead of --tokens");
  const std::vector<CLI::Option*> task_flags = {
      hs->add_option("--length", hsr->length, "Offset-key sequence length (default: the model's max_position)"),
      hs->add_option("--sequences", hsr->sequences, "Offset-key sequences (default 64)"),
      hs->add_option("--split", hsr->split, "Their index split: heldout (default) or test"),
      hs->add_option("--task-seed", hsr->task_seed, "Their generator seed (default 42, as drope-eval offset-key)")};
  hs->add_option("--batch-size", hsr->batch, "Sequences per forward (default 16)");
  hs->add_option("--out", hsr->out, "Output directory for head_scores.{json,csv} (and sequences.json with --task)")
      ->required();
  hs->callback([hsr, task_flags, &rc] {
    rc = app::run([&] {
      if (hsr->task.empty())
        for (const CLI::Option* o : task_flags)
          if (o->count() > 0) throw Error(o->get_name() + " goes with --task offset-key");
      app::check_size_flag("--length", hsr->length, 0, app::kMaxTokensFlag);
      app::check_size_flag("--sequences", hsr->sequences, 1, 1 << 16);
      app::check_size_flag("--batch-size", hsr->batch, 1, 1 << 16);
      Inputs in = model_inputs(hsr->model);
      in.emplace_back("--tokens", hsr->tokens);
      const auto lock = claim_out(hsr->out, in);
      analyze::run_head_scores(*hsr);
      return 0;
    });
  });
}

}  // namespace drope::analyzecli
