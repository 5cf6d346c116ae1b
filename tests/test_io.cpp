#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "drope/core/files.h"
#include "drope/io/model_io.h"
#include "drope/io/safetensors.h"
#include "test_util.h"

using namespace drope;
namespace fs = std::filesystem;

TEST(Safetensors, RoundTripAllDtypes) {
  auto d = test::tmp_dir("st_rt");
  std::vector<std::pair<std::string, at::Tensor>> ts = {{"a", torch::randn({3, 4})},
                                                        {"b", torch::randn({5}).to(torch::kBFloat16)},
                                                        {"c", torch::randn({2, 2, 2}).to(torch::kHalf)},
                                                        {"d", torch::arange(7, torch::kLong)},
                                                        {"e", torch::zeros({0, 3})}};
  io::save_safetensors(d + "/x.safetensors", ts, {{"k", "v"}});
  io::SafetensorsFile f(d + "/x.safetensors");
  EXPECT_EQ(f.header().metadata.at("k"), "v");
  for (const auto& [name, t] : ts) {
    auto got = f.get(name);
    EXPECT_EQ(got.scalar_type(), t.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(got, t)) << name;
  }
  EXPECT_EQ(f.header().data_start % 8, 0u);
}

TEST(Safetensors, HostileHeadersAreRejectedWithClearErrors) {
  auto d = test::tmp_dir("st_bad");
  io::save_safetensors(d + "/ok.safetensors", {{"w", torch::randn({4, 4})}});
  const std::string good = read_file(d + "/ok.safetensors");
  auto write = [&](const std::string& name, const std::string& bytes) {
    std::ofstream(d + "/" + name, std::ios::binary) << bytes;
    return d + "/" + name;
  };
  auto open = [](const std::string& p) { io::SafetensorsFile f(p); };
  auto trunc = write("trunc.safetensors", good.substr(0, 20));
  test::expect_error([&] { open(trunc); }, {"trunc.safetensors", "truncated"});
  auto tiny = write("tiny.safetensors", "abc");
  test::expect_error([&] { open(tiny); }, {"tiny.safetensors", "8-byte"});
  auto body = write("body.safetensors", good.substr(0, good.size() - 10));
  test::expect_error([&] { open(body); }, {"body.safetensors", "'w'", "outside"});
  std::string huge = good;
  huge[7] = 0x7f;
  test::expect_error([&] { open(write("huge.safetensors", huge)); }, {"huge.safetensors", "header claims"});
  auto hdr = [&](const std::string& json) {
    std::string s(8, '\0');
    uint64_t n = json.size();
    for (int i = 0; i < 8; ++i) s[i] = char((n >> (8 * i)) & 0xff);
    return s + json + std::string(64, '\0');
  };
  test::expect_error([&] { open(write("j.safetensors", hdr("{not json"))); }, {"j.safetensors", "JSON"});
  test::expect_error(
      [&] { open(write("dt.safetensors", hdr(R"({"x":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})"))); },
      {"dt.safetensors", "'x'", "Q7"});
  test::expect_error(
      [&] { open(write("sz.safetensors", hdr(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"))); },
      {"sz.safetensors", "'x'", "12 bytes"});
  test::expect_error(
      [&] {
        open(write("big.safetensors", hdr(R"({"x":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,8]}})")));
      },
      {"big.safetensors", "'x'"});
  test::expect_error(
      [&] {
        open(write(
            "ov.safetensors",
            hdr(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})")));
      },
      {"ov.safetensors", "overlap"});
}

TEST(ModelIO, SaveLoadRoundTripAndStrictLoading) {
  auto cfg = model_preset("micro");
  cfg.tie_embeddings = false;
  DecoderLM m(cfg);
  m->reset_parameters(11);
  auto d = test::tmp_dir("model_rt");
  EXPECT_TRUE(io::save_model(m, d + "/m"));
  EXPECT_TRUE(fs::exists(d + "/m/config.json"));
  auto back = io::load_model(d + "/m");
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, cfg.vocab_size, {1, 10});
  EXPECT_TRUE(torch::equal(m->forward(ids), back->forward(ids)));
  // bf16 storage loads back within bf16 rounding.
  io::save_model(m, d + "/bf16", {at::kBFloat16});
  auto b16 = io::load_model(d + "/bf16");
  EXPECT_TRUE(torch::equal(b16->named_parameters()["model.norm.weight"], m->named_parameters()["model.norm.weight"]));
  auto w = m->named_parameters()["lm_head.weight"];
  EXPECT_TRUE(torch::equal(b16->named_parameters()["lm_head.weight"], w.to(torch::kBFloat16).to(torch::kFloat)));

  // Missing tensor.
  auto params = m->named_parameters();
  std::vector<std::pair<std::string, at::Tensor>> ts;
  for (const auto& kv : params)
    if (kv.key() != "model.layers.1.mlp.up_proj.weight") ts.emplace_back(kv.key(), kv.value());
  fs::create_directories(d + "/missing");
  fs::copy_file(d + "/m/drope.yaml", d + "/missing/drope.yaml");
  io::save_safetensors(d + "/missing/model.safetensors", ts);
  test::expect_error([&] { io::load_model(d + "/missing"); }, {"missing", "model.layers.1.mlp.up_proj.weight"});
  // Shape mismatch: a checkpoint of another model shape.
  auto other = cfg;
  other.intermediate_size = 96;
  DecoderLM o(other);
  io::save_model(o, d + "/other");
  fs::copy_file(d + "/m/drope.yaml", d + "/other/drope.yaml", fs::copy_options::overwrite_existing);
  // Its config.json would now disagree with the copied drope.yaml and be refused first (test_model_dir_checks.py).
  fs::remove(d + "/other/config.json");
  test::expect_error([&] { io::load_model(d + "/other"); }, {"model.safetensors", "shape", "[96, 64]", "[128, 64]"});
  // NoPE models are saved without an HF config.
  auto nope = cfg;
  nope.positional.type = PositionalType::kNope;
  DecoderLM n(nope);
  EXPECT_FALSE(io::save_model(n, d + "/nope"));
  EXPECT_FALSE(fs::exists(d + "/nope/config.json"));
  EXPECT_EQ(io::load_model_config_dir(d + "/nope").positional.type, PositionalType::kNope);
  test::expect_error([&] { io::load_model(d + "/nowhere"); }, {"nowhere", "not found"});
}

TEST(ModelIO, NonFiniteWeightsAreRefusedNamingTensorAndFile) {
  auto cfg = model_preset("micro");
  DecoderLM m(cfg);
  m->reset_parameters(3);
  const auto d = test::tmp_dir("model_nonfinite");
  io::save_model(m, d + "/m");
  // 12 bad values (NaN, +inf, -inf) in one tensor of a single file, then of a sharded checkpoint.
  std::vector<std::pair<std::string, at::Tensor>> ts;
  const std::string bad = "model.layers.1.mlp.up_proj.weight";
  for (const auto& kv : m->named_parameters()) {
    auto t = kv.value().detach().clone();
    if (kv.key() == bad) {
      auto flat = t.view({-1});
      for (int i = 0; i < 12; ++i) flat[i * 7] = i % 3 == 0 ? NAN : i % 3 == 1 ? INFINITY : -INFINITY;
    }
    ts.emplace_back(kv.key(), t);
  }
  io::save_safetensors(d + "/m/model.safetensors", ts);
  test::expect_error([&] { io::load_model(d + "/m"); },
                     {bad + " in " + d + "/m/model.safetensors has 12 non-finite values"});
  // One bad value, in a float16 shard of an indexed checkpoint: the shard is named.
  fs::create_directories(d + "/sharded");
  fs::copy_file(d + "/m/drope.yaml", d + "/sharded/drope.yaml");
  std::vector<std::pair<std::string, at::Tensor>> a, b;
  std::string index = "{\"weight_map\": {";
  for (size_t i = 0; i < ts.size(); ++i) {
    auto t = ts[i].second.clone().nan_to_num(0.0, 0.0, 0.0).to(at::kHalf);
    if (ts[i].first == bad) t.view({-1})[5] = INFINITY;
    (i % 2 ? b : a).emplace_back(ts[i].first, t);
    index += (i ? ", \"" : "\"") + ts[i].first + "\": \"" + (i % 2 ? "b" : "a") + ".safetensors\"";
  }
  io::save_safetensors(d + "/sharded/a.safetensors", a);
  io::save_safetensors(d + "/sharded/b.safetensors", b);
  write_file_atomic(d + "/sharded/model.safetensors.index.json", index + "}}");
  const bool in_b = std::any_of(b.begin(), b.end(), [&](const auto& kv) { return kv.first == bad; });
  test::expect_error([&] { io::load_model(d + "/sharded"); },
                     {bad + " in " + d + "/sharded/" + (in_b ? "b" : "a") + ".safetensors has 1 non-finite value "});
}

TEST(ModelIO, ShardErrorsNameTheIndexKeyThatPointsAtTheShard) {
  auto cfg = model_preset("micro");
  DecoderLM m(cfg);
  m->reset_parameters(5);
  const auto d = test::tmp_dir("model_index") + "/m";
  io::save_model(m, d);
  fs::remove(d + "/model.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> a, b;
  std::map<std::string, std::string> where;
  for (const auto& kv : m->named_parameters()) {
    const bool in_b = a.size() > b.size();
    (in_b ? b : a).emplace_back(kv.key(), kv.value().detach().clone());
    where[kv.key()] = in_b ? "b.safetensors" : "a.safetensors";
  }
  const std::string index_path = d + "/model.safetensors.index.json";
  auto write_index = [&](const std::map<std::string, std::string>& w) {
    nlohmann::json j = {{"metadata", nlohmann::json::object()}, {"weight_map", w}};
    write_file_atomic(index_path, j.dump());
  };
  io::save_safetensors(d + "/a.safetensors", a);
  io::save_safetensors(d + "/b.safetensors", b);
  write_index(where);
  EXPECT_NO_THROW(io::load_model(d));
  // The first key (in name order) that names b.safetensors.
  std::string b_key;
  for (const auto& [k, f] : where)
    if (f == "b.safetensors" && b_key.empty()) b_key = k;
  const size_t b_count = b.size();
  fs::rename(d + "/b.safetensors", d + "/b.moved");
  test::expect_error([&] { io::load_model(d); },
                     {index_path + ": weight_map['" + b_key + "'] (and " + std::to_string(b_count - 1) +
                          " more) names the shard b.safetensors",
                      "not found"});
  const std::string bytes = read_file(d + "/b.moved");
  write_file_atomic(d + "/b.safetensors", bytes.substr(0, bytes.size() / 2));  // truncated
  test::expect_error([&] { io::load_model(d); }, {index_path + ": weight_map['" + b_key + "']", "b.safetensors"});
  write_file_atomic(d + "/b.safetensors", bytes);
  // A key that names a shard without that tensor (it is in the other one).
  auto wrong = where;
  const std::string a_key = a.front().first;
  wrong[a_key] = "b.safetensors";
  write_index(wrong);
  test::expect_error([&] { io::load_model(d); }, {index_path + ": weight_map['" + a_key +
                                                  "'] names the shard b.safetensors, which holds no tensor '" + a_key +
                                                  "' (it is in " + d + "/a.safetensors)"});
  write_index({});
  test::expect_error([&] { io::load_model(d); }, {index_path, "weight_map is empty"});
}

TEST(ModelIO, HfConfigErrors) {
  test::expect_error([] { io::parse_hf_config("{\"model_type\": \"gpt2\"}", "c.json"); }, {"c.json", "gpt2"});
  test::expect_error([] { io::parse_hf_config("{\"model_type\": \"llama\", \"hidden_size\": \"big\"}", "c.json"); },
                     {"c.json", "hidden_size"});
  test::expect_error(
      [] { io::parse_hf_config("{\"model_type\": \"llama\", \"rope_scaling\": {\"type\": \"su\"}}", "c.json"); },
      {"c.json", "su"});
  test::expect_error([] { io::parse_hf_config("[1,", "c.json"); }, {"c.json", "JSON"});
  // Keys of the wrong kind are refused, not read as "absent".
  for (const char* v : {"\"linear\"", "[1,2]", "4"})
    test::expect_error(
        [&] { io::parse_hf_config(std::string("{\"model_type\": \"llama\", \"rope_scaling\": ") + v + "}", "c.json"); },
        {"c.json: rope_scaling must be an object or null, got " + std::string(v)});
  test::expect_error([] { io::parse_hf_config("{\"model_type\": \"llama\", \"rope_parameters\": \"x\"}", "c.json"); },
                     {"c.json: rope_parameters must be an object or null"});
  test::expect_error([] { io::parse_hf_config("{\"model_type\": \"llama\", \"bos_token_id\": -5}", "c.json"); },
                     {"c.json: bos_token_id must be a token id >= 0 or null, got -5"});
  test::expect_error([] { io::parse_hf_config("{\"model_type\": \"llama\", \"eos_token_id\": [-2, 3]}", "c.json"); },
                     {"c.json: eos_token_id must be a token id >= 0 or null"});
  EXPECT_NO_THROW(
      io::parse_hf_config("{\"model_type\": \"llama\", \"bos_token_id\": [], \"rope_scaling\": null}", "c.json"));
}

namespace {
const char* kSmall = R"("vocab_size": 97, "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
                        "num_key_value_heads": 2, "max_position_embeddings": 32)";
std::string small_config(const std::string& type, const std::string& extra, int layers = 2) {
  return "{\"model_type\": \"" + type + "\", \"num_hidden_layers\": " + std::to_string(layers) + ", " + kSmall +
         (extra.empty() ? "" : ", " + extra) + "}";
}
}  // namespace

TEST(ModelIO, DropeReferenceConfigs) {
  // attention_type → QK-norm mode; RoPE (and its scaling) gone; softmax_scale kept; the unused norm listed.
  auto a = io::import_hf_config(small_config("llama_drope", R"("attention_type": "qk_norm_nope",
      "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16})"),
                                "c.json");
  EXPECT_EQ(a.config.positional.type, PositionalType::kNope);
  EXPECT_EQ(a.config.positional.scaling.type, RopeScalingType::kNone);
  EXPECT_EQ(a.config.qk_norm, QkNorm::kQk);
  EXPECT_FALSE(a.config.qk_norm_per_head);
  EXPECT_EQ(a.config.softmax_scale, 0.0);
  EXPECT_TRUE(a.unused.empty());
  auto q = io::import_hf_config(
      small_config("qwen2_drope", R"("attention_type": "q_norm_nope", "softmax_scale": 0.25)"), "c.json");
  EXPECT_EQ(q.config.arch, "qwen2");
  EXPECT_TRUE(q.config.attention_bias);
  EXPECT_EQ(q.config.qk_norm, QkNorm::kQ);
  EXPECT_EQ(q.config.softmax_scale, 0.25);
  ASSERT_EQ(q.unused.size(), 1u);
  EXPECT_EQ(q.unused[0].suffix, "self_attn.k_norm.weight");
  EXPECT_EQ(q.unused[0].size, 2 * 16);
  auto k = io::import_hf_config(
      small_config("llama_drope", R"("attention_type": "k_norm_nope", "softmax_scale": null)"), "c.json");
  EXPECT_EQ(k.config.qk_norm, QkNorm::kK);
  EXPECT_EQ(k.config.softmax_scale, 0.0);
  ASSERT_EQ(k.unused.size(), 1u);
  EXPECT_EQ(k.unused[0].suffix, "self_attn.q_norm.weight");
  EXPECT_EQ(k.unused[0].size, 4 * 16);
  EXPECT_EQ(io::parse_hf_config(small_config("llama_drope", ""), "c.json").qk_norm, QkNorm::kNone);  // default nope
  // Written back: the same config, the same extra tensors; a plain HF config cannot hold it.
  EXPECT_FALSE(q.config.hf_expressible());
  auto back = io::import_hf_config(io::drope_reference_config_json(q.config), "back.json");
  EXPECT_EQ(back.model_type, "qwen2_drope");
  auto resolved = q.config;
  resolved.head_dim = resolved.resolved_head_dim();  // the export writes head_dim explicitly
  EXPECT_EQ(model_config_to_yaml(back.config), model_config_to_yaml(resolved));
  EXPECT_EQ(io::drope_reference_extra_tensors(q.config).size(), 1u);
  EXPECT_TRUE(io::drope_reference_extra_tensors(a.config).empty());
  // Errors name the file and the key.
  test::expect_error([] { io::parse_hf_config(small_config("llama_drope", R"("attention_type": "rope")"), "c.json"); },
                     {"c.json", "attention_type", "'rope'", "qk_norm_nope"});
  for (const char* bad : {"0", "-1", "\"big\"", "[1]"})
    test::expect_error(
        [&] { io::parse_hf_config(small_config("llama_drope", std::string("\"softmax_scale\": ") + bad), "c.json"); },
        {"c.json", "softmax_scale"});
  auto rope = io::parse_hf_config(small_config("llama", ""), "c.json");
  test::expect_error([&] { io::drope_reference_config_json(rope); }, {"drope-reference", "layer 0 is RoPE"});
  auto per_head = a.config;
  per_head.qk_norm_per_head = true;
  test::expect_error([&] { io::drope_reference_config_json(per_head); }, {"drope-reference", "per head"});
  auto warm = a.config;
  warm.softmax_temperature = 0.1;
  test::expect_error([&] { io::drope_reference_config_json(warm); }, {"drope-reference", "softmax_temperature"});
}

TEST(ModelIO, SmolLM3Configs) {
  auto plan = [](const std::string& extra, int layers) {
    return io::parse_hf_config(small_config("smollm3", extra, layers), "c.json").positional;
  };
  // transformers' default: every 4th layer NoPE; rope_theta defaults to 2e6.
  auto p = plan("", 8);
  EXPECT_EQ(p.layers, (std::vector<std::string>{"rope", "rope", "rope", "nope", "rope", "rope", "rope", "nope"}));
  EXPECT_EQ(p.rope_theta, 2e6);
  EXPECT_EQ(p.window, 0);
  EXPECT_TRUE(plan(R"("no_rope_layers": [1, 1])", 2).layers.empty());  // RoPE everywhere: a plain Llama
  EXPECT_EQ(plan(R"("no_rope_layers": [0, true, 1, 0, 1])", 3).layers,
            (std::vector<std::string>{"nope", "rope", "rope"}));
  // Sliding window: NoPE layers when only use_sliding_window + sliding_window are set; layer_types when given.
  auto w = plan(R"("no_rope_layers": [1, 0], "use_sliding_window": true, "sliding_window": 8)", 2);
  EXPECT_EQ(w.layers, (std::vector<std::string>{"rope", "nope-swa"}));
  EXPECT_EQ(w.window, 8);
  EXPECT_EQ(plan(R"("no_rope_layers": [1, 0], "sliding_window": 8)", 2).window, 0);
  auto t = plan(
      R"("no_rope_layers": [1, 1], "sliding_window": 5, "layer_types": ["sliding_attention", "full_attention"])", 2);
  EXPECT_EQ(t.layers, (std::vector<std::string>{"rope-swa", "rope"}));
  EXPECT_EQ(t.window, 5);
  test::expect_error([&] { plan(R"("no_rope_layers": [1])", 2); }, {"c.json", "no_rope_layers", "1 entries", "2"});
  test::expect_error([&] { plan(R"("no_rope_layers": [1, 0.5])", 2); }, {"c.json", "no_rope_layers", "entry 1"});
  test::expect_error([&] { plan(R"("no_rope_layer_interval": -1)", 2); }, {"c.json", "no_rope_layer_interval"});
  test::expect_error([&] { plan(R"("layer_types": ["full_attention"])", 2); }, {"c.json", "layer_types"});
  test::expect_error([&] { plan(R"("layer_types": ["sliding_attention", "full_attention"])", 2); },
                     {"c.json", "sliding_window"});
  test::expect_error([&] { io::parse_hf_config(small_config("smollm3", "", 5000), "c.json"); },
                     {"c.json", "num_layers", "5000"});
}

TEST(Safetensors, FifosAreRefusedAndLayoutMustBeExact) {
  auto d = test::tmp_dir("st_fifo");
  const std::string fifo = d + "/model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // Without a writer, open() on a FIFO blocks: the reader must refuse it before that.
  auto done = std::async(std::launch::async, [&]() -> std::string {
    try {
      io::SafetensorsFile f(fifo);
      return "accepted";
    } catch (const Error& e) {
      return e.what();
    }
  });
  if (done.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
    ADD_FAILURE() << "blocked on the FIFO";
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // release the reader
    if (fd >= 0) ::close(fd);
  }
  const std::string msg = done.get();
  EXPECT_NE(msg.find(fifo), std::string::npos) << msg;
  EXPECT_NE(msg.find("FIFO"), std::string::npos) << msg;

  // Two readers must load the same weights: appended bytes and repeated names are refused.
  io::save_safetensors(d + "/ok.safetensors", {{"a", torch::ones({2})}, {"b", torch::zeros({3})}});
  const std::string good = read_file(d + "/ok.safetensors");
  write_file_atomic(d + "/tail.safetensors", good + "hidden");
  test::expect_error([&] { io::SafetensorsFile f(d + "/tail.safetensors"); }, {"tail.safetensors", "6 trailing bytes"});
  std::string dup = good;
  const auto at = dup.find("\"b\"");
  ASSERT_NE(at, std::string::npos);
  dup[at + 1] = 'a';  // the header now names "a" twice
  write_file_atomic(d + "/dup.safetensors", dup);
  test::expect_error([&] { io::SafetensorsFile f(d + "/dup.safetensors"); },
                     {"dup.safetensors", "duplicate key \"a\""});
}
