// drope-analyze: positional analyses (paper §3–4). `bias-grad` measures the gradients of the attention
// positional bias A^c at initialisation (Figure 3), `constant-seq` checks Proposition 3.1, `rope-scaling`
// prints/plots the scaled RoPE frequencies γ_m (Figure 6), `attention` draws one head's attention map,
// `head-scores` measures every head's previous-token attention (and, on offset-key sequences, the answer's
// attention to its query and needles) and `needle-attention` shows where the last query attends around a needle
// (Figures 7–8). The analyses run in
// the library (analyze/runners.h); this file parses flags.
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "app_common.h"
#include "cli_numbers.h"
#include "drope/analyze/runners.h"
#include "drope/config/names.h"
#include "drope/core/files.h"
#include "log_flags.h"

namespace {

using Inputs = std::vector<std::pair<std::string, std::string>>;

// Refuses --out when it is an input or inside one (check_output_paths), then locks it for the run: a second
// drope-analyze writing the same directory is refused. An empty `out` (print only) is neither.
drope::DirLock claim_out(const std::string& out, const Inputs& inputs) {
  if (out.empty()) return {};
  drope::check_output_paths("--out", out, {out}, inputs);
  return drope::DirLock(out, drope::DirLock::Where::kInside);
}

Inputs model_inputs(const drope::analyze::ModelChoice& m) { return {{"--model", m.dir}, {"--config", m.config}}; }

}  // namespace

int main(int argc, char** argv) {
  namespace an = drope::analyze;
  CLI::App cli{"drope-analyze: positional-bias and RoPE-scaling analyses"};
  cli.require_subcommand(1);
  const std::vector<std::string> kPositional = drope::names_of<drope::PositionalType>();

  an::RopeScalingRun rsr;
  auto* rs =
      cli.add_subcommand("rope-scaling", "Scaled RoPE frequencies as JSON; with --out also the paper's Figure 6");
  rs->add_option("--type", rsr.type, drope::join_names(drope::names_of<drope::RopeScalingType>()))
      ->check(CLI::IsMember(drope::names_of<drope::RopeScalingType>()));
  rs->add_option("--factor", rsr.factors, "Extension factor(s) s (default 2,3,4)")->delimiter(',');
  rs->add_option("--theta", rsr.theta, "RoPE base θ");
  rs->add_option("--head-dim", rsr.head_dim, "Head dimension d");
  rs->add_option("--train-length", rsr.train_length, "Original context length L0");
  rs->add_option("--seq-len", rsr.seq_len, "Current sequence length (dynamic methods; default L0)");
  rs->add_option("--beta-fast", rsr.scaling.beta_fast, "YaRN β_fast");
  rs->add_option("--beta-slow", rsr.scaling.beta_slow, "YaRN β_slow");
  rs->add_option("--out", rsr.out, "Directory for rope_scaling.{png,svg,csv}: γ_m of PI, NTK and YaRN per factor");

  an::BiasGradRun bgr;
  auto* bg = cli.add_subcommand("bias-grad", "Gradients of the attention positional bias A^c (paper Figure 3)");
  bg->add_option("--model", bgr.models, "Model directory (repeatable); seeds vary only the inputs");
  bg->add_option("--config", bgr.configs, "Model YAML (repeatable), initialised once per seed");
  bg->add_option("--preset", bgr.preset,
                 "With no --model/--config: this preset with RoPE and with NoPE (default tiny)");
  bg->add_option("--seqs", bgr.seqs, "Input sequences N per seed");
  bg->add_option("--seeds", bgr.seeds, "Seeds M (initialisation and inputs)");
  bg->add_option("--seq-len", bgr.seq_len, "Sequence length T");
  bg->add_option("--text", bgr.text, "Text file: byte-level token windows instead of random tokens");
  bg->add_option("--out", bgr.out, "Output directory for bias_grad.{json,csv,png,svg}")->required();

  // constant-seq and attention share the model selection
  an::ConstantSeqRun csr;
  an::AttentionMapRun amr;
  an::HeadScoresRun hsr;
  auto* cs = cli.add_subcommand("constant-seq", "Proposition 3.1 on a sequence of one repeated token (float64)");
  auto* att = cli.add_subcommand("attention", "Heatmap of one head's attention map for a prompt");
  auto* hs = cli.add_subcommand("head-scores",
                                "Previous-token attention of every layer x head; on offset-key sequences also the "
                                "answer's attention to its query and needles");
  for (auto [sub, m] : {std::pair{cs, &csr.model}, std::pair{att, &amr.model}, std::pair{hs, &hsr.model}}) {
    sub->add_option("--model", m->dir, "Model directory");
    sub->add_option("--config", m->config, "Model YAML config (initialised with --seed)");
    sub->add_option("--preset", m->preset, "Preset name (default tiny), initialised with --seed");
    sub->add_option("--positional", m->positional, "Positional type for --preset")->check(CLI::IsMember(kPositional));
    sub->add_option("--seed", m->seed, "Initialisation seed for --config/--preset");
  }
  cs->add_option("--token", csr.token, "The repeated token id");
  cs->add_option("--seq-len", csr.seq_len, "Sequence length T");
  cs->add_option("--out", csr.out, "Directory for constant_seq.json");
  att->add_option("--text", amr.text, "Prompt as a text file (byte-level tokens)");
  att->add_option("--tokens", amr.tokens, "Prompt as a JSON list of token-id lists (the first is used)");
  att->add_option("--max-tokens", amr.max_tokens, "Use at most this many prompt tokens");
  att->add_option("--layer", amr.layer, "Layer index (0-based)")->required();
  att->add_option("--head", amr.head, "Query head index (0-based)")->required();
  att->add_flag("--log-color", amr.log_color, "Colour by log10(α)");
  att->add_option("--out", amr.out, "Output directory for attention_L<layer>_H<head>.{png,svg,json}")->required();
  hs->add_option("--tokens", hsr.tokens, "JSON list of equally long token-id lists (all are scored)");
  hs->add_option("--task", hsr.task, "offset-key: score the task's own sequences instead of --tokens");
  const std::vector<CLI::Option*> hs_task_flags = {
      hs->add_option("--length", hsr.length, "Offset-key sequence length (default: the model's max_position)"),
      hs->add_option("--sequences", hsr.sequences, "Offset-key sequences (default 64)"),
      hs->add_option("--split", hsr.split, "Their index split: heldout (default) or test"),
      hs->add_option("--task-seed", hsr.task_seed, "Their generator seed (default 42, as drope-eval offset-key)")};
  hs->add_option("--batch-size", hsr.batch, "Sequences per forward (default 16)");
  hs->add_option("--out", hsr.out, "Output directory for head_scores.{json,csv} (and sequences.json with --task)")
      ->required();

  an::NeedleAttentionRun nd;
  auto* na = cli.add_subcommand("needle-attention",
                                "Where the last query attends around a needle, per method (paper Figures 7–8)");
  na->add_option("--model", nd.models, "Model directory (repeatable)")->required();
  na->add_option(
      "--method", nd.methods,
      "none | pi:S | ntk:S | yarn:S | ... | temperature:C | temperature:auto | drope+qk (repeatable; default "
      "none; docs/evaluation.md)");
  na->add_option("--tokenizer", nd.tokenizer, "Tokenizer (default: the model directory's; byte tokens if none)");
  na->add_option("--length", nd.length, "Prompt tokens (default 2 × the model's training length)");
  na->add_option("--depth", nd.depth, "Needle depth in % of the haystack (default 50)");
  na->add_option("--window", nd.window, "Keys shown on each side of the needle (default 32)");
  na->add_option("--haystack", nd.haystack, "Haystack text file (default GPL-3 from /usr/share/common-licenses)");
  na->add_option("--seed", nd.seed, "Seed of the needle's key and value");
  na->add_option("--out", nd.out, "Output directory for needle_attention.{png,svg,json,csv}")->required();
  drope::app::add_log_flags(cli, "drope-analyze", stderr);  // stdout carries JSON and tables
  drope::app::check_numeric_flags(cli);
  CLI11_PARSE(cli, argc, argv);

  return drope::app::run([&] {
    if (na->parsed()) {
      Inputs in = {{"--tokenizer", nd.tokenizer}, {"--haystack", nd.haystack}};
      for (const auto& m : nd.models) in.emplace_back("--model", m);
      const auto lock = claim_out(nd.out, in);
      an::run_needle_attention(nd);
    } else if (rs->parsed()) {
      const auto lock = claim_out(rsr.out, {});
      an::run_rope_scaling(rsr);
    } else if (bg->parsed()) {
      drope::app::check_size_flag("--seqs", bgr.seqs, 1, 1 << 16);
      drope::app::check_size_flag("--seeds", bgr.seeds, 1, 1 << 16);
      drope::app::check_size_flag("--seq-len", bgr.seq_len, 2, drope::app::kMaxTokensFlag);
      Inputs in = {{"--text", bgr.text}};
      for (const auto& m : bgr.models) in.emplace_back("--model", m);
      for (const auto& c : bgr.configs) in.emplace_back("--config", c);
      const auto lock = claim_out(bgr.out, in);
      an::run_bias_grad(bgr);
    } else if (cs->parsed()) {
      drope::app::check_size_flag("--seq-len", csr.seq_len, 2, drope::app::kMaxTokensFlag);
      const auto lock = claim_out(csr.out, model_inputs(csr.model));
      an::run_constant_seq(csr);
    } else if (hs->parsed()) {
      if (hsr.task.empty())
        for (const CLI::Option* o : hs_task_flags)
          if (o->count() > 0) throw drope::Error(o->get_name() + " goes with --task offset-key");
      drope::app::check_size_flag("--length", hsr.length, 0, drope::app::kMaxTokensFlag);
      drope::app::check_size_flag("--sequences", hsr.sequences, 1, 1 << 16);
      drope::app::check_size_flag("--batch-size", hsr.batch, 1, 1 << 16);
      Inputs in = model_inputs(hsr.model);
      in.emplace_back("--tokens", hsr.tokens);
      const auto lock = claim_out(hsr.out, in);
      an::run_head_scores(hsr);
    } else {
      drope::app::check_size_flag("--max-tokens", amr.max_tokens, 1, drope::app::kMaxTokensFlag);
      Inputs in = model_inputs(amr.model);
      in.emplace_back("--text", amr.text);
      in.emplace_back("--tokens", amr.tokens);
      const auto lock = claim_out(amr.out, in);
      an::run_attention_map(amr);
    }
    return 0;
  });
}
