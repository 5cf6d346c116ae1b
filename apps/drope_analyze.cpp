// drope-analyze: positional analyses. `rope-scaling` prints the scaled RoPE frequencies (γ_m = ω'_m/ω_m)
// from the same function the model uses.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app_common.h"
#include "drope/core/error.h"
#include "drope/model/rope_scaling.h"

int main(int argc, char** argv) {
  CLI::App cli{"drope-analyze: positional-bias and RoPE-scaling analyses"};
  cli.require_subcommand(1);
  drope::RopeScalingConfig s;
  double theta = 10000.0;
  int64_t head_dim = 64, max_position = 2048, seq_len = 0;
  std::vector<double> factors;
  auto* rs = cli.add_subcommand("rope-scaling", "Scaled RoPE frequencies as JSON (paper Figure 6)");
  rs->add_option("--type", s.type, "none | pi | ntk | dynamic-ntk | yarn | dynamic-yarn | llama3")
      ->check(CLI::IsMember({"none", "pi", "ntk", "dynamic-ntk", "yarn", "dynamic-yarn", "llama3"}));
  rs->add_option("--factor", factors, "Extension factor(s) s")->delimiter(',');
  rs->add_option("--theta", theta, "RoPE base θ");
  rs->add_option("--head-dim", head_dim, "Head dimension d");
  rs->add_option("--train-length", max_position, "Original context length L0");
  rs->add_option("--seq-len", seq_len, "Current sequence length (dynamic methods; default L0)");
  rs->add_option("--beta-fast", s.beta_fast, "YaRN β_fast");
  rs->add_option("--beta-slow", s.beta_slow, "YaRN β_slow");
  CLI11_PARSE(cli, argc, argv);
  return drope::app::run([&] {
    if (head_dim <= 2 || head_dim % 2) drope::fail("--head-dim must be an even number > 2, got {}", head_dim);
    if (!(theta > 1)) drope::fail("--theta must be > 1, got {}", theta);
    if (max_position <= 0) drope::fail("--train-length must be positive, got {}", max_position);
    if (factors.empty()) factors = {2.0, 3.0, 4.0};
    nlohmann::json out = nlohmann::json::array();
    const auto base = drope::rope_base_frequencies(theta, head_dim);
    for (double f : factors) {
      if (!(f >= 1.0)) drope::fail("--factor must be >= 1, got {}", f);
      auto sc = s;
      sc.factor = f;
      auto r = drope::rope_frequencies(theta, head_dim, sc, max_position, seq_len > 0 ? seq_len : max_position);
      std::vector<double> gamma(r.inv_freq.size());
      for (size_t i = 0; i < gamma.size(); ++i) gamma[i] = r.inv_freq[i] / base[i];
      out.push_back({{"type", s.type}, {"factor", f}, {"inv_freq", r.inv_freq}, {"gamma", gamma},
                     {"attention_factor", r.attention_factor}});
    }
    fmt::print("{}\n", out.dump());
    return 0;
  });
}
