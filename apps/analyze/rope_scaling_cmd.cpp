// Flags of `drope-analyze rope-scaling` and `bias-grad` (analyze::run_rope_scaling, analyze::run_bias_grad),
// and the output rule every command follows.
#include <filesystem>
#include <memory>
#include <system_error>

#include "analyze/commands.h"
#include "app_common.h"
#include "cli_numbers.h"
#include "drope/config/names.h"

namespace drope::analyzecli {

DirLock claim_out(const std::string& out, const Inputs& inputs) {
  if (out.empty()) return {};
  check_output_paths("--out", out, {out}, inputs);
  // An input may lie in --out, but not under a name the run writes there: it would be written over.
  namespace fs = std::filesystem;
  for (const auto& [flag, in] : inputs) {
    std::error_code ec;
    if (in.empty() || !fs::is_regular_file(in, ec)) continue;
    const fs::path file = fs::weakly_canonical(fs::absolute(in), ec);  // the file a symlink input names
    if (fs::equivalent(file.parent_path(), out, ec) && analyze::is_output_name(file.filename().string()))
      fail("--out {}: the run writes {} there, which is the input {} {}; choose another output directory", out,
           file.filename().string(), flag, in);
  }
  return DirLock(out, DirLock::Where::kInside);
}

void add_rope_scaling_command(CLI::App& cli, int& rc) {
  auto r = std::make_shared<analyze::RopeScalingRun>();
  auto* rs =
      cli.add_subcommand("rope-scaling", "Scaled RoPE frequencies as JSON; with --out also the paper's Figure 6");
  rs->add_option("--type", r->type, join_names(names_of<RopeScalingType>()))
      ->check(CLI::IsMember(names_of<RopeScalingType>()));
  rs->add_option("--factor", r->factors, "Extension factor(s) s (default 2,3,4)")->delimiter(',');
  rs->add_option("--theta", r->theta, "RoPE base θ");
  rs->add_option("--head-dim", r->head_dim, "Head dimension d");
  rs->add_option("--train-length", r->train_length, "Original context length L0");
  rs->add_option("--seq-len", r->seq_len, "Current sequence length (dynamic methods; default L0)");
  rs->add_option("--beta-fast", r->scaling.beta_fast, "YaRN β_fast");
  rs->add_option("--beta-slow", r->scaling.beta_slow, "YaRN β_slow");
  rs->add_option("--out", r->out, "Directory for rope_scaling.{png,svg,csv}: γ_m of PI, NTK and YaRN per factor");
  rs->callback([r, &rc] {
    rc = app::run([&] {
      const auto lock = claim_out(r->out, {});
      analyze::run_rope_scaling(*r);
      return 0;
    });
  });
}

void add_bias_grad_command(CLI::App& cli, int& rc) {
  auto r = std::make_shared<analyze::BiasGradRun>();
  auto* bg = cli.add_subcommand("bias-grad", "Gradients of the attention positional bias A^c (paper Figure 3)");
  bg->add_option("--model", r->models, "Model directory (repeatable); seeds vary only the inputs");
  bg->add_option("--config", r->configs, "Model YAML (repeatable), initialised once per seed");
  bg->add_option("--preset", r->preset, "With no --model/--config: this preset with RoPE and with NoPE (default tiny)");
  bg->add_option("--seqs", r->seqs, "Input sequences N per seed");
  bg->add_option("--seeds", r->seeds, "Seeds M (initialisation and inputs)");
  bg->add_option("--seq-len", r->seq_len, "Sequence length T");
  bg->add_option("--text", r->text, "Text file: byte-level token windows instead of random tokens");
  bg->add_option("--out", r->out, "Output directory for bias_grad.{json,csv,png,svg}")->required();
  bg->callback([r, &rc] {
    rc = app::run([&] {
      app::check_size_flag("--seqs", r->seqs, 1, 1 << 16);
      app::check_size_flag("--seeds", r->seeds, 1, 1 << 16);
      app::check_size_flag("--seq-len", r->seq_len, 2, app::kMaxTokensFlag);
      Inputs in = {{"--text", r->text}};
      for (const auto& m : r->models) in.emplace_back("--model", m);
      for (const auto& c : r->configs) in.emplace_back("--config", c);
      const auto lock = claim_out(r->out, in);
      analyze::run_bias_grad(*r);
      return 0;
    });
  });
}

}  // namespace drope::analyzecli
