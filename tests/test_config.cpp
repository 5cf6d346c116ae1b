#include <fstream>
#include <limits>
#include <vector>

#include "drope/config/model_config.h"
#include "drope/core/files.h"
#include "drope/core/yaml.h"
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
  auto p = write(d, "m.yaml",
                 "model:\n  preset: tiny\n  num_layers: 8\n  positional:\n    type: rnope-swa\n    window: 16\n");
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
  c.positional.scaling.type = RopeScalingType::kYarn;
  c.positional.scaling.factor = 3.5;
  c.positional.rope_theta = 123456.789;
  c.qk_norm = QkNorm::kQ;
  c.softmax_temperature = 0.412;
  c.softmax_scale = 0.3125;
  c.positional.layers = {"rope", "nope", "alibi", "rope"};
  auto d = test::tmp_dir("cfg_rt");
  auto back = load_model_config_file(write(d, "rt.yaml", model_config_to_yaml(c)));
  EXPECT_EQ(model_config_to_yaml(back), model_config_to_yaml(c));
  EXPECT_EQ(back.positional.rope_theta, 123456.789);
  EXPECT_EQ(back.softmax_temperature, 0.412);
  EXPECT_EQ(back.softmax_scale, 0.3125);
  EXPECT_EQ(back.positional.layers, c.positional.layers);
}

TEST(Config, UnknownKeyNamesFileLineAndKey) {
  auto d = test::tmp_dir("cfg_bad");
  auto p = write(d, "typo.yaml", "model:\n  preset: tiny\n  positional:\n    type: rope\n    rope_thetta: 5\n");
  test::expect_error([&] { load_model_config_file(p); },
                     {"typo.yaml:5:", "model.positional.rope_thetta", "unknown key", "rope_theta"});
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

TEST(Config, DuplicateKeysAndSectionsAreRefusedWithBothLines) {
  auto d = test::tmp_dir("cfg_dup");
  // yaml-cpp keeps the first of two equal keys without a word; other YAML readers keep the last.
  auto p = write(d, "dupkey.yaml", "preset: tiny\nnum_layers: 2\nhidden_size: 64\nnum_layers: 8\n");
  test::expect_error([&] { load_model_config_file(p); }, {"dupkey.yaml:4:", "duplicate key 'num_layers'", "line 2"});
  auto q = write(d, "dupsection.yaml", "model:\n  preset: tiny\nmodel:\n  preset: micro\n");
  test::expect_error([&] { load_model_config_file(q); }, {"dupsection.yaml:3:", "duplicate key 'model'", "line 1"});
  auto r = write(d, "nested.yaml", "preset: tiny\npositional:\n  type: rope\n  rope_theta: 10\n  rope_theta: 1e6\n");
  test::expect_error([&] { load_model_config_file(r); }, {"nested.yaml:5:", "duplicate key 'rope_theta'"});
}

TEST(Config, SeveralDocumentsNonUtf8AndDeepNestingAreRefused) {
  auto d = test::tmp_dir("cfg_docs");
  auto p = write(d, "two.yaml", "preset: tiny\n---\npreset: micro\n");
  test::expect_error([&] { load_model_config_file(p); }, {"two.yaml:3", "second YAML document", "exactly one"});
  auto q = write(d, "latin1.yaml", "preset: tiny\npositional:\n  type: rope # caf\xe9\n");
  test::expect_error([&] { load_model_config_file(q); }, {"latin1.yaml:3:", "not valid UTF-8", "0xe9"});
  // 200 levels: under yaml-cpp's own recursion guard (2000 parser frames, several per level), over ours
  // (128, as for JSON).
  auto r = write(d, "deep.yaml", "preset: tiny\nx: " + std::string(200, '[') + std::string(200, ']') + "\n");
  test::expect_error([&] { load_model_config_file(r); }, {"deep.yaml", "nested more than 128 levels"});
  // Exactly one document with an explicit start marker is fine.
  auto ok = write(d, "marker.yaml", "---\npreset: micro\n");
  EXPECT_EQ(load_model_config_file(ok).num_layers, 2);
}

TEST(Config, TagsMergeKeysAndParserDepthAreRefused) {
  auto d = test::tmp_dir("cfg_tags");
  // yaml-cpp keeps a tag and reads the value under it as if untagged.
  auto p = write(d, "str.yaml", "preset: tiny\nnum_layers: !!str 4\n");
  test::expect_error([&] { load_model_config_file(p); }, {"str.yaml:2:", "tag", "not supported"});
  auto q = write(d, "py.yaml", "preset: tiny\npositional: !!python/object:os.system\n  type: rope\n");
  test::expect_error([&] { load_model_config_file(q); }, {"py.yaml:2:", "python/object", "not supported"});
  auto r = write(d, "merge.yaml", "preset: tiny\nx: &base {type: rope}\npositional:\n  <<: *base\n");
  test::expect_error([&] { load_model_config_file(r); }, {"merge.yaml:4:", "merge keys", "not supported"});
  // Past yaml-cpp's own recursion guard (2000 parser frames), whose message is "bad file".
  const int deep = 100000;
  auto s = write(d, "deep.yaml", "preset: tiny\nx: " + std::string(deep, '[') + std::string(deep, ']') + "\n");
  test::expect_error([&] { load_model_config_file(s); }, {"deep.yaml:2:", "nested more than 128 levels"});
  std::string maps;
  for (int i = 0; i < deep; ++i) maps += "{a: ";
  auto t = write(d, "deepmap.yaml", "preset: tiny\nx: " + maps + "1" + std::string(deep, '}') + "\n");
  test::expect_error([&] { load_model_config_file(t); }, {"deepmap.yaml:2:", "nested more than 128 levels"});
  // Quoted strings ("!") and a quoted '<<' key are plain values.
  auto ok = write(d, "quoted.yaml", "preset: \"tiny\"\npositional: {type: 'rope'}\n");
  EXPECT_EQ(load_model_config_file(ok).num_layers, 4);
}

// yaml-cpp spends about 800 bytes on each node it builds: a 4 MB `[1,1,...]` took 1.7 GB before the node cap.
TEST(Config, LargeYamlIsRefusedBeforeYamlCppBuildsIt) {
  auto d = test::tmp_dir("cfg_large");
  std::string ones = "1";
  for (int i = 0; i < 100000; ++i) ones += ",1";
  auto p = write(d, "wide.yaml", "preset: tiny\nx: [" + ones + "]\n");
  test::expect_error([&] { load_model_config_file(p); }, {"wide.yaml:2:", "more than 65536 YAML nodes"});
  auto q = write(d, "long.yaml", "preset: tiny\narch: " + std::string(2 << 20, 'a') + "\n");
  test::expect_error([&] { load_model_config_file(q); }, {"long.yaml", "more than the 1048576 bytes"});
}

TEST(Config, IntegersWithALeadingZeroAreRefused) {
  auto d = test::tmp_dir("cfg_zero");
  // yaml-cpp reads 010 as octal 8, as YAML 1.1 readers do; YAML 1.2 readers read 10.
  auto p = write(d, "z.yaml", "preset: tiny\nnum_layers: 010\n");
  test::expect_error([&] { load_model_config_file(p); }, {"z.yaml:2:", "num_layers", "'010'", "leading zero"});
  auto q = write(d, "f.yaml", "preset: tiny\npositional: {rope_theta: 010000}\n");
  test::expect_error([&] { load_model_config_file(q); }, {"f.yaml", "rope_theta", "leading zero"});
  auto r = write(d, "s.yaml", "preset: tiny\npositional: {scaling: {type: yarn, factor: 4, beta_fast: -07}}\n");
  test::expect_error([&] { load_model_config_file(r); }, {"s.yaml", "beta_fast", "leading zero"});
  // 0, 0.5 and hexadecimal (16 to every reader) keep their meaning.
  auto ok = write(d, "ok.yaml", "preset: tiny\nnum_layers: 0x2\nrms_eps: 0.5\nbos_token_id: 0\n");
  const auto c = load_model_config_file(ok);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.rms_eps, 0.5);
}

TEST(Config, NullValuesSayNull) {
  auto d = test::tmp_dir("cfg_null");
  auto p = write(d, "n.yaml", "preset: tiny\nrms_eps:\n");
  test::expect_error([&] { load_model_config_file(p); }, {"n.yaml:2:", "rms_eps", "expected a number, got null"});
  auto q = write(d, "s.yaml", "preset: tiny\narch: ~\n");
  test::expect_error([&] { load_model_config_file(q); }, {"s.yaml:2:", "arch", "got null"});
  auto r = write(d, "l.yaml", "preset: tiny\npositional: {layers: [rope, null, rope, rope]}\n");
  test::expect_error([&] { load_model_config_file(r); }, {"l.yaml", "element 1", "got null"});
}

TEST(Config, NonFiniteAndOverflowingNumbersAreRefused) {
  auto d = test::tmp_dir("cfg_nonfinite");
  struct Case {
    const char* yaml;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"positional: {rope_theta: .inf}\n", {"positional.rope_theta", "finite", "inf"}},
      {"rms_eps: .nan\n", {"rms_eps", "finite", "nan"}},
      {"init_std: -.inf\n", {"init_std", "finite"}},
      {"softmax_temperature: .inf\n", {"softmax_temperature", "finite"}},
      {"softmax_scale: .nan\n", {"softmax_scale", "finite"}},
      {"softmax_scale: -0.5\n", {"softmax_scale", ">= 0"}},
      {"positional: {scaling: {type: yarn, factor: .inf}}\n", {"scaling.factor", "finite"}},
      {"positional: {scaling: {type: yarn, factor: 4, beta_fast: .nan}}\n", {"beta_fast", "finite"}},
      {"positional: {scaling: {type: yarn, factor: 4, beta_slow: 0}}\n", {"beta_slow", "> 0", "got 0"}},
      {"positional: {scaling: {type: yarn, factor: 4, attention_factor: .inf}}\n", {"attention_factor", "finite"}},
      {"positional: {rope_theta: 1e999}\n", {"rope_theta", "out of range"}},
      {"vocab_size: 99999999999999999999\n", {"vocab_size", "integer 99999999999999999999 is out of range"}},
      {"vocab_size: -99999999999999999999\n", {"vocab_size", "out of range"}},
  };
  for (const auto& c : cases) {
    auto p = write(d, "m.yaml", std::string("preset: tiny\n") + c.yaml);
    std::vector<std::string> n = c.needles;
    n.push_back("m.yaml");
    try {
      load_model_config_file(p);
      ADD_FAILURE() << "accepted: " << c.yaml;
    } catch (const Error& e) {
      for (const auto& s : n)
        EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << "\nmissing: " << s;
    }
  }
  // The same check guards configs built in code (HF import, presets edited by a caller).
  auto c = model_preset("micro");
  c.positional.rope_theta = std::numeric_limits<double>::infinity();
  test::expect_error([&] { c.validate("src"); },
                     {"src: model.positional.rope_theta must be a finite number > 1, got inf"});
}

TEST(Config, QuotedNumbersAndOtherBooleanWordsAreRefused) {
  // yaml-cpp converts the quoted "4" to 4 and yes / on / y to true, where PyYAML and YAML 1.2 readers disagree.
  auto d = test::tmp_dir("cfg_plain");
  struct Case {
    const char* yaml;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"num_layers: \"4\"\n", {"num_layers", "expected an integer", "(or block) string \"4\"", "without quotes"}},
      {"rms_eps: '1e-5'\n", {"rms_eps", "expected a number", "(or block) string \"1e-5\""}},
      {"tie_embeddings: \"false\"\n", {"tie_embeddings", "true or false", "(or block) string \"false\""}},
      {"num_layers: |\n  4\n", {"num_layers", "expected an integer", "(or block) string \"4\\n\";"}},  // one line
      {"tie_embeddings: yes\n", {"tie_embeddings", "got 'yes'", "a string to others"}},
      {"mlp_bias: off\n", {"mlp_bias", "got 'off'", "a string to others"}},
      {"mlp_bias: y\n", {"mlp_bias", "got 'y'", "a string to others"}},
      {"mlp_bias: maybe\n", {"mlp_bias", "expected true or false, got 'maybe'"}},
  };
  for (const auto& c : cases) {
    auto p = write(d, "m.yaml", std::string("preset: tiny\n") + c.yaml);
    try {
      load_model_config_file(p);
      ADD_FAILURE() << "accepted: " << c.yaml;
    } catch (const Error& e) {
      for (const auto& s : c.needles)
        EXPECT_NE(std::string(e.what()).find(s), std::string::npos) << e.what() << "\nmissing: " << s;
      // "maybe" is no boolean to any reader: no remark about other readers.
      if (std::string(c.yaml).find("maybe") != std::string::npos)
        EXPECT_EQ(std::string(e.what()).find("other"), std::string::npos) << e.what();
    }
  }
  // List elements: the same rule.
  YamlMap lists(parse_yaml("a: [256, \"512\"]\nb: [0.5, '1.5']\n", "l.yaml"), "l.yaml", "");
  std::vector<int64_t> ints;
  std::vector<double> reals;
  test::expect_error([&] { lists.get("a", ints); }, {"l.yaml", "element 1", "(or block) string \"512\""});
  test::expect_error([&] { lists.get("b", reals); }, {"l.yaml", "element 1", "(or block) string \"1.5\""});
  // What every reader agrees on keeps its meaning: the YAML 1.2 booleans in any of their spellings, plain numbers.
  auto ok = write(d, "ok.yaml", "preset: tiny\ntie_embeddings: False\nmlp_bias: TRUE\nnum_layers: 3\n");
  const auto c = load_model_config_file(ok);
  EXPECT_FALSE(c.tie_embeddings);
  EXPECT_TRUE(c.mlp_bias);
  EXPECT_EQ(c.num_layers, 3);
}
