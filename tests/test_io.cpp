#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>

#include <torch/torch.h>

#include "drope/core/files.h"
#include "drope/io/model_io.h"
#include "drope/io/safetensors.h"
#include "test_util.h"

using namespace drope;
namespace fs = std::filesystem;

TEST(Safetensors, RoundTripAllDtypes) {
  auto d = test::tmp_dir("st_rt");
  std::vector<std::pair<std::string, at::Tensor>> ts = {
      {"a", torch::randn({3, 4})},
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
  test::expect_error([&] { open(write("dt.safetensors", hdr(R"({"x":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})"))); },
                     {"dt.safetensors", "'x'", "Q7"});
  test::expect_error([&] { open(write("sz.safetensors", hdr(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})"))); },
                     {"sz.safetensors", "'x'", "12 bytes"});
  test::expect_error(
      [&] { open(write("big.safetensors", hdr(R"({"x":{"dtype":"F32","shape":[1000000,1000000],"data_offsets":[0,8]}})"))); },
      {"big.safetensors", "'x'"});
  test::expect_error([&] {
    open(write("ov.safetensors", hdr(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})")));
  }, {"ov.safetensors", "overlap"});
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

TEST(ModelIO, HfConfigErrors) {
  test::expect_error([] { io::parse_hf_config("{\"model_type\": \"gpt2\"}", "c.json"); }, {"c.json", "gpt2"});
  test::expect_error([] { io::parse_hf_config("{\"model_type\": \"llama\", \"hidden_size\": \"big\"}", "c.json"); },
                     {"c.json", "hidden_size"});
  test::expect_error([] { io::parse_hf_config("{\"model_type\": \"llama\", \"rope_scaling\": {\"type\": \"su\"}}", "c.json"); },
                     {"c.json", "su"});
  test::expect_error([] { io::parse_hf_config("[1,", "c.json"); }, {"c.json", "JSON"});
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
  test::expect_error([&] { io::SafetensorsFile f(d + "/dup.safetensors"); }, {"dup.safetensors", "duplicate key \"a\""});
}
