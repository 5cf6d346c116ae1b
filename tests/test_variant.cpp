// The typed name tables (config/names.h), method variants (model/variant.h) and the results schema
// (eval/results.h): every name round-trips, bounds are the same everywhere, and readers refuse what they
// cannot read.
#include <filesystem>

#include <torch/torch.h>

#include "drope/config/model_config.h"
#include "drope/config/names.h"
#include "drope/core/files.h"
#include "drope/eval/results.h"
#include "drope/model/variant.h"
#include "test_util.h"

using namespace drope;

namespace {

template <typename E>
void expect_round_trip() {
  const auto names = names_of<E>();
  ASSERT_EQ(names.size(), NameTable<E>::kEntries.size());
  for (const auto& [value, name] : NameTable<E>::kEntries) {
    EXPECT_EQ(name_of(value), name);
    EXPECT_EQ(parse_name<E>(name, "t"), value);
    EXPECT_EQ(fmt::format("{}", value), name);
    EXPECT_EQ(nlohmann::json(value).get<std::string>(), name);
  }
  // Names are distinct, so each parses to exactly one value.
  for (size_t i = 0; i < names.size(); ++i)
    for (size_t j = i + 1; j < names.size(); ++j) EXPECT_NE(names[i], names[j]);
}

}  // namespace

TEST(Names, EveryNameRoundTrips) {
  expect_round_trip<PositionalType>();
  expect_round_trip<RopeScalingType>();
  expect_round_trip<QkNorm>();
  expect_round_trip<TrainPhase>();
}

TEST(Names, UnknownNameListsEveryChoice) {
  test::expect_error(
      [] { parse_name<RopeScalingType>("rope", "--type"); },
      {"--type", "RoPE scaling type", "'rope'", "none, pi, ntk, dynamic-ntk, yarn, dynamic-yarn or llama3"});
  // YAML validation uses the same table (llama3 was missing from one of five hand-written lists).
  const auto d = test::tmp_dir("names");
  write_file_atomic(d + "/m.yaml", "preset: micro\npositional: {type: xpos}\n");
  test::expect_error([&] { load_model_config_file(d + "/m.yaml"); },
                     {"m.yaml", "positional.type", "rope, nope, alibi, rnope-swa", "xpos"});
}

TEST(Variant, ParsesEveryFormAndRoundTrips) {
  for (const char* text : {"none", "pi:2", "ntk:4", "dynamic-ntk:2", "yarn:2.5", "dynamic-yarn:2", "llama3:8",
                           "temperature:0.1", "temperature:auto", "drope", "drope+qk", "drope+q", "drope+k",
                           "yarn:2,temperature:0.3", "temperature:auto,drope+qk"}) {
    const auto v = parse_variant(text, "--method");
    EXPECT_EQ(v.str(), text);  // the canonical order: scaling, temperature, drope
    EXPECT_EQ(parse_variant(v.str(), "--method").str(), v.str());
  }
  const auto v = parse_variant("yarn:3", "--method");
  EXPECT_EQ(v.scaling, RopeScalingType::kYarn);
  EXPECT_EQ(v.factor, 3.0);
  EXPECT_TRUE(parse_variant("none", "m").is_identity());
  EXPECT_EQ(parse_variant("drope+q", "m").drop_options.qk_norm, QkNorm::kQ);
}

TEST(Variant, OneSetOfBounds) {
  // A factor of exactly 1 is the identity and allowed everywhere (YAML, config.json, CLI); below is not.
  EXPECT_NO_THROW(parse_variant("pi:1", "m"));
  test::expect_error([] { parse_variant("yarn:0.5", "--method"); }, {"--method yarn:0.5", "factor", ">= 1", "0.5"});
  test::expect_error([] { parse_variant("yarn:inf", "--method"); }, {"'inf' is not a number"});
  test::expect_error([] { parse_variant("yarn:nan", "--method"); }, {"'nan' is not a number"});
  test::expect_error([] { parse_variant("yarn:1e999", "--method"); }, {"'1e999' is not a number"});
  // Only plain decimals: strtod alone would read hex and skip leading spaces.
  test::expect_error([] { parse_variant("yarn:0x2", "--method"); }, {"'0x2' is not a number"});
  test::expect_error([] { parse_variant("yarn: 2", "--method"); }, {"' 2' is not a number"});
  EXPECT_EQ(parse_variant("yarn:2e0", "m").factor, 2.0);
  EXPECT_EQ(parse_variant("temperature:.5", "m").temperature, 0.5);
  test::expect_error([] { parse_variant("temperature:-1", "--method"); }, {"temperature", "[0, 100]", "-1"});
  test::expect_error([] { parse_variant("temperature:1e300", "--method"); }, {"temperature", "[0, 100]"});
  EXPECT_EQ(parse_variant("temperature:100", "m").temperature, 100.0);
  test::expect_error([] { parse_variant("yarn", "--method"); }, {"yarn:S"});
  test::expect_error([] { parse_variant("yarn:2x", "--method"); }, {"'2x' is not a number"});
  test::expect_error([] { parse_variant("rope:2", "--method"); }, {"unknown method", "temperature:auto"});
  test::expect_error([] { parse_variant("drope+v", "--method"); }, {"QK-norm mode", "'v'"});
  test::expect_error([] { parse_variant("drope:2", "--method"); }, {"takes no value"});
  test::expect_error([] { parse_variant("yarn:2,pi:2", "--method"); }, {"second RoPE scaling"});
  test::expect_error([] { parse_variant("drope,yarn:2", "--method"); }, {"cannot be combined"});
  test::expect_error([] { parse_variant("yarn:2,", "--method"); }, {"empty part"});
  test::expect_error([] { parse_variant("", "--method"); }, {"empty method"});
  // The model config applies the same bound.
  const auto d = test::tmp_dir("variant-bounds");
  write_file_atomic(d + "/m.yaml", "preset: micro\npositional: {scaling: {type: pi, factor: 0.9}}\n");
  test::expect_error([&] { load_model_config_file(d + "/m.yaml"); }, {"scaling.factor", ">= 1"});
}

TEST(Variant, ApplyKeepsWeightsAndChangesOnlyTheMethod) {
  torch::manual_seed(0);
  auto cfg = model_preset("micro");
  DecoderLM base(cfg);
  base->reset_parameters(1);
  const auto dir = test::tmp_dir("variant-apply");
  // temperature:auto reads <model>/temperature.json; absent → a clear error.
  test::expect_error([&] { apply_variant(base, parse_variant("temperature:auto", "m"), dir); },
                     {"temperature.json", "fit-temperature"});
  write_file_atomic(temperature_file(dir), R"({"c": 0.25})");
  auto t = apply_variant(base, parse_variant("yarn:2,temperature:auto", "m"), dir);
  EXPECT_EQ(t->config().softmax_temperature, 0.25);
  EXPECT_EQ(t->config().positional.scaling.type, RopeScalingType::kYarn);
  EXPECT_EQ(t->config().positional.scaling.original_max_position, cfg.max_position);
  auto d = apply_variant(base, parse_variant("drope+qk", "m"), dir);
  EXPECT_EQ(d->config().positional.type, PositionalType::kNope);
  EXPECT_EQ(d->config().qk_norm, QkNorm::kQk);
  auto pd = d->named_parameters();
  for (const auto& kv : base->named_parameters()) EXPECT_TRUE(torch::equal(kv.value(), pd[kv.key()])) << kv.key();
  EXPECT_TRUE(apply_variant(base, Variant{}, dir).ptr() == base.ptr());  // the identity is the model itself
  auto nope_cfg = cfg;
  nope_cfg.positional.type = PositionalType::kNope;
  DecoderLM nope(nope_cfg);
  test::expect_error([&] { apply_variant(nope, parse_variant("ntk:2", "m"), dir); }, {"no RoPE layers"});
}

TEST(Results, WrittenWithTheSchemaAndReadBackStrictly) {
  const auto d = test::tmp_dir("results");
  auto doc = eval::new_results("ppl");
  doc["method"] = {{"label", "rope"}};
  doc["results"] = nlohmann::json::array({{{"length", 16}, {"ppl", 3.5}}});
  doc["summary"] = {{"ppl@16", 3.5}};
  tasks::Table t;
  t.columns = {"length", "ppl"};
  t.add_row({"16", "3.5"});
  eval::write_results(d + "/r", doc, t);
  const auto back = eval::read_results(d + "/r.json", "--with", "ppl");
  EXPECT_EQ(back["schema"], "drope.results");
  EXPECT_EQ(back["schema_version"], 1);
  EXPECT_EQ(eval::results_label(back, "x"), "rope");
  // A document built without new_results is refused by the writer.
  test::expect_error([&] { eval::write_results(d + "/bad", {{"kind", "ppl"}}, t); }, {"schema"});
  EXPECT_FALSE(std::filesystem::exists(d + "/bad.json"));
  auto put = [&](const std::string& name, const nlohmann::json& j) {
    write_file_atomic(d + "/" + name, j.dump());
    return d + "/" + name;
  };
  // Legacy files (before the schema keys) are read; newer versions, other schemas and kinds are not.
  EXPECT_NO_THROW(eval::read_results(put("legacy.json", {{"kind", "ppl"}, {"summary", {{"a", 1}}}}), "", "ppl"));
  auto newer = doc;
  newer["schema_version"] = 2;
  test::expect_error([&] { eval::read_results(put("newer.json", newer), "--with"); },
                     {"--with", "newer.json", "schema_version 2", "update drope"});
  auto other = doc;
  other["schema"] = "something.else";
  test::expect_error([&] { eval::read_results(put("other.json", other), ""); }, {"other.json", "something.else"});
  test::expect_error([&] { eval::read_results(d + "/r.json", "--with", "niah"); }, {"'ppl' results file", "'niah'"});
  test::expect_error([&] { eval::read_results(put("list.json", nlohmann::json::array()), ""); }, {"JSON object"});
  auto bad_summary = doc;
  bad_summary["summary"] = 3;
  test::expect_error([&] { eval::read_results(put("bs.json", bad_summary), ""); }, {"'summary' must be an object"});
  write_file_atomic(d + "/broken.json", "{");
  test::expect_error([&] { eval::read_results(d + "/broken.json", "--with"); }, {"--with", "broken.json"});
}
