#include <fstream>

#include "drope/config/model_config.h"
#include "drope/core/files.h"
#include "test_util.h"

using namespace drope;

namespace {
std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  auto p = dir + "/" + name;
  write_file_atomic(p, text);
  return p;
}
}  // namespace

TEST(Config, PresetsMatchSpec) {
  auto q = model_preset("qwen2-0.5b");
  EXPECT_EQ(q.hidden_size, 896);
  EXPECT_EQ(q.intermediate_size, 4864);
  EXPECT_EQ(q.num_layers, 24);
  EXPECT_EQ(q.num_heads, 14);
  EXPECT_EQ(q.num_kv_heads, 2);
  EXPECT_EQ(q.resolved_head_dim(), 64);
  EXPECT_EQ(q.positional.rope_theta, 1e6);
  EXPECT_EQ(q.max_position, 1024);
  auto s = model_preset("smollm-360m");
  EXPECT_EQ(s.hidden_size, 960);
  EXPECT_EQ(s.num_layers, 32);
  EXPECT_EQ(s.num_heads, 15);
  EXPECT_EQ(s.num_kv_heads, 5);
  EXPECT_EQ(s.max_position, 2048);
  test::expect_error([] { model_preset("gpt5"); }, {"gpt5", "tiny"});
}

TEST(Config, YamlPresetWithOverrides) {
  auto d = test::tmp_dir("cfg_ok");
  auto p = write(d, "m.yaml", "model:\n  preset: tiny\n  num_layers: 8\n  positional:\n    type: rnope-swa\n    window: 16\n");
  auto c = load_model_config_file(p);
  EXPECT_EQ(c.num_layers, 8);
  EXPECT_EQ(c.hidden_size, 128);
  auto plan = c.layer_plan();
  ASSERT_EQ(plan.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const bool global = (i + 1) % 4 == 0;
    EXPECT_EQ(plan[i].kind, global ? PositionalKind::kNope : PositionalKind::kRope) << i;
    EXPECT_EQ(plan[i].window, global ? 0 : 16) << i;
  }
}

TEST(Config, YamlRoundTrip) {
  auto c = model_preset("tiny");
  c.positional.scaling.type = "yarn";
  c.positional.scaling.factor = 3.5;
  c.positional.rope_theta = 123456.789;
  c.qk_norm = "q";
  c.softmax_temperature = 0.412;
  c.positional.layers = {"rope", "nope", "alibi", "rope"};
  auto d = test::tmp_dir("cfg_rt");
  auto back = load_model_config_file(write(d, "rt.yaml", model_config_to_yaml(c)));
  EXPECT_EQ(model_config_to_yaml(back), model_config_to_yaml(c));
  EXPECT_EQ(back.positional.rope_theta, 123456.789);
  EXPECT_EQ(back.softmax_temperature, 0.412);
  EXPECT_EQ(back.positional.layers, c.positional.layers);
}

TEST(Config, UnknownKeyNamesFileLineAndKey) {
  auto d = test::tmp_dir("cfg_bad");
  auto p = write(d, "typo.yaml", "model:\n  preset: tiny\n  positional:\n    type: rope\n    rope_thetta: 5\n");
  test::expect_error([&] { load_model_config_file(p); }, {"typo.yaml:5:", "model.positional.rope_thetta", "unknown key",
                                                          "rope_theta"});
}

TEST(Config, WrongTypeAndBadChoice) {
  auto d = test::tmp_dir("cfg_type");
  auto p = write(d, "t.yaml", "preset: tiny\nnum_layers: four\n");
  test::expect_error([&] { load_model_config_file(p); }, {"t.yaml:2:", "num_layers", "expected an integer", "four"});
  auto q = write(d, "c.yaml", "preset: tiny\npositional: {type: xpos}\n");
  test::expect_error([&] { load_model_config_file(q); }, {"c.yaml", "positional.type", "rnope-swa", "xpos"});
  auto r = write(d, "l.yaml", "preset: tiny\npositional: [1, 2]\n");
  test::expect_error([&] { load_model_config_file(r); }, {"l.yaml", "positional", "mapping"});
}

TEST(Config, MalformedYaml) {
  auto d = test::tmp_dir("cfg_malformed");
  auto p = write(d, "bad.yaml", "model:\n  preset: [tiny\n  x: 1\n");
  test::expect_error([&] { load_model_config_file(p); }, {"bad.yaml:", "malformed YAML"});
  test::expect_error([&] { load_model_config_file(d + "/missing.yaml"); }, {"missing.yaml", "not found"});
}

TEST(Config, ValidationNamesTheProblem) {
  auto d = test::tmp_dir("cfg_val");
  auto p = write(d, "gqa.yaml", "preset: tiny\nnum_heads: 6\nnum_kv_heads: 4\nhead_dim: 32\n");
  test::expect_error([&] { load_model_config_file(p); }, {"gqa.yaml", "num_heads (6)", "num_kv_heads (4)"});
  auto q = write(d, "swa.yaml", "preset: tiny\npositional: {type: rnope-swa}\n");
  test::expect_error([&] { load_model_config_file(q); }, {"swa.yaml", "window"});
  auto r = write(d, "layers.yaml", "preset: tiny\npositional: {layers: [rope, nope]}\n");
  test::expect_error([&] { load_model_config_file(r); }, {"layers.yaml", "2 entries", "(4)"});
}
