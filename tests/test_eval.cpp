// KV-cache decoding, greedy generation and perplexity protocols, each against a plain full-sequence
// computation written here (no cache, one forward per step).
#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "drope/core/cpu_budget.h"
#include "drope/core/error.h"
#include "drope/eval/generate.h"
#include "drope/eval/offset_key.h"
#include "drope/eval/perplexity.h"
#include "drope/model/transformer.h"
#include "test_util.h"

using namespace drope;

namespace {

ModelConfig cfg_for(const std::string& positional, int64_t window = 0) {
  auto c = model_preset("micro");
  c.positional.type = parse_name<PositionalType>(positional, "test");
  c.positional.window = window;
  c.num_layers = 4;       // RNoPE-SWA: 3 windowed RoPE layers + 1 global NoPE layer
  c.init_std = 0.25;      // peaked logits: greedy choices are far from ties
  return c;
}

DecoderLM make(const ModelConfig& c, torch::Dtype dt = torch::kDouble) {
  DecoderLM m(c);
  m->reset_parameters(11);
  m->to(dt);
  m->eval();
  return m;
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  auto g = at::make_generator<at::CPUGeneratorImpl>(seed);
  auto t = at::randint(vocab, {n}, g, torch::kLong);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = int32_t(t[i].item<int64_t>());
  return v;
}

torch::Tensor ids_of(const std::vector<int32_t>& v) {
  return torch::tensor(std::vector<int64_t>(v.begin(), v.end()), torch::kLong).view({1, int64_t(v.size())});
}

// Greedy decoding without a cache: a full forward over prompt + generated tokens per step.
std::vector<int32_t> naive_greedy(DecoderLM& m, std::vector<int32_t> seq, int64_t n) {
  torch::NoGradGuard ng;
  std::vector<int32_t> out;
  for (int64_t i = 0; i < n; ++i) {
    auto logits = m->forward(ids_of(seq));
    auto t = int32_t(logits[0][-1].argmax().item<int64_t>());
    out.push_back(t);
    seq.push_back(t);
  }
  return out;
}

}  // namespace

class KVCacheTest : public ::testing::TestWithParam<std::pair<std::string, int64_t>> {};

// Logits of chunked prefill + one-token steps through the cache equal one full forward (float64).
TEST_P(KVCacheTest, ChunkedPrefillAndDecodeMatchFullForward) {
  auto [pos, window] = GetParam();
  auto m = make(cfg_for(pos, window));
  const auto seq = random_tokens(40, 256, 3);
  torch::NoGradGuard ng;
  auto full = m->forward(ids_of(seq));  // (1, 40, V)
  KVCache cache;
  ForwardOptions fo;
  fo.cache = &cache;
  std::vector<torch::Tensor> parts;
  auto ids = ids_of(seq);
  for (int64_t s : {0, 13, 26}) parts.push_back(m->forward(ids.narrow(1, s, 13), fo));  // prefill 39 in chunks
  parts.push_back(m->forward(ids.narrow(1, 39, 1), fo));                                 // one decode step
  auto cached = torch::cat(parts, 1);
  EXPECT_EQ(cache.length, 40);
  EXPECT_LT((cached - full).abs().max().item<double>(), 1e-10) << pos;
}

INSTANTIATE_TEST_SUITE_P(Positional, KVCacheTest,
                         ::testing::Values(std::make_pair(std::string("rope"), int64_t(0)),
                                           std::make_pair(std::string("nope"), int64_t(0)),
                                           std::make_pair(std::string("alibi"), int64_t(0)),
                                           std::make_pair(std::string("rnope-swa"), int64_t(8))));

// The fused CPU kernel reads cache views in place (float32): same logits as the reference attention.
TEST(KVCache, Float32FusedDecodeMatchesReference) {
  auto m = make(cfg_for("rope"), torch::kFloat);
  const auto seq = random_tokens(33, 256, 4);
  torch::NoGradGuard ng;
  auto step = [&](bool reference) {
    std::unique_ptr<ops::ForceReferenceAttention> force;
    if (reference) force = std::make_unique<ops::ForceReferenceAttention>();
    KVCache cache;
    ForwardOptions fo;
    fo.cache = &cache;
    m->forward(ids_of(seq).narrow(1, 0, 32), fo);
    return m->forward(ids_of(seq).narrow(1, 32, 1), fo);
  };
  EXPECT_LT((step(false) - step(true)).abs().max().item<double>(), 1e-4);
}

// With the long-context temperature on, chunked prefill sees the β of the whole prompt.
TEST(KVCache, ChunkedPrefillKeepsTemperatureOfWholePrompt) {
  auto c = cfg_for("nope");
  c.max_position = 8;
  c.softmax_temperature = 0.7;
  auto m = make(c);
  const auto seq = random_tokens(30, 256, 5);
  torch::NoGradGuard ng;
  auto full = m->forward(ids_of(seq));
  KVCache cache;
  cache.length_hint = {30};
  ForwardOptions fo;
  fo.cache = &cache;
  auto a = m->forward(ids_of(seq).narrow(1, 0, 10), fo);
  auto b = m->forward(ids_of(seq).narrow(1, 10, 20), fo);
  EXPECT_LT((torch::cat({a, b}, 1) - full).abs().max().item<double>(), 1e-10);
  // Without the hint the first chunk would use β(10) ≠ β(30): the test can tell the difference.
  KVCache plain;
  fo.cache = &plain;
  auto a2 = m->forward(ids_of(seq).narrow(1, 0, 10), fo);
  EXPECT_GT((a2 - full.narrow(1, 0, 10)).abs().max().item<double>(), 1e-6);
}

class GenerateTest : public ::testing::TestWithParam<std::string> {};

// Greedy tokens with cache, alone and in a left-padded batch, equal the no-cache loop.
TEST_P(GenerateTest, MatchesNaiveGreedyAloneAndBatched) {
  const std::string pos = GetParam();
  auto m = make(cfg_for(pos, pos == "rnope-swa" ? 8 : 0));
  std::vector<std::vector<int32_t>> prompts = {random_tokens(23, 256, 21), random_tokens(9, 256, 22),
                                               random_tokens(31, 256, 23)};
  eval::GenerateOptions opt;
  opt.max_new_tokens = 12;
  opt.prefill_chunk = 10;
  opt.stop_at_eos = false;
  std::vector<std::vector<int32_t>> expect;
  for (const auto& p : prompts) expect.push_back(naive_greedy(m, p, 12));
  for (int64_t bs : {1, 3}) {
    opt.batch_size = bs;
    auto got = eval::generate_tokens(m, prompts, opt, -1);
    ASSERT_EQ(got.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(got[i].tokens, expect[i]) << pos << " batch " << bs << " prompt " << i;
      EXPECT_EQ(got[i].finish, "length");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Positional, GenerateTest, ::testing::Values("rope", "nope", "alibi", "rnope-swa"));

// Per-row temperature in a padded batch: rows of different lengths get their own β.
TEST(Generate, PaddedBatchWithTemperatureMatchesAlone) {
  auto c = cfg_for("nope");
  c.max_position = 8;
  c.softmax_temperature = 0.5;
  auto m = make(c);
  std::vector<std::vector<int32_t>> prompts = {random_tokens(25, 256, 31), random_tokens(12, 256, 32)};
  eval::GenerateOptions opt;
  opt.max_new_tokens = 6;
  opt.stop_at_eos = false;
  auto alone = eval::generate_tokens(m, prompts, opt, -1);
  opt.batch_size = 2;
  auto batched = eval::generate_tokens(m, prompts, opt, -1);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(alone[i].tokens, batched[i].tokens) << i;
}

// A tokenizer smaller than the model's embedding (padded rows): generated padding ids are left out of the text,
// not an error (HF tokenizers' decode skips them too); the token ids are the plain greedy ones.
class EightTokenTokenizer : public text::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (char c : text) ids.push_back(int32_t(static_cast<unsigned char>(c) % 8));
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id < 0 || id >= 8) fail("token id {} is not in the vocabulary", id);
      s += char('a' + id);
    }
    return s;
  }
  int64_t vocab_size() const override { return 8; }
  int32_t eos_id() const override { return -1; }
  int32_t bos_id() const override { return -1; }
  std::string kind() const override { return "test"; }
  const std::string& path() const override { return path_; }

 private:
  std::string path_ = "eight";
};

TEST(Generate, PaddingIdsBeyondTheTokenizerAreLeftOutOfTheText) {
  auto m = make(cfg_for("rope"));
  EightTokenTokenizer tok;
  eval::GenerateOptions opt;
  opt.max_new_tokens = 12;
  opt.stop = {"zz"};  // the stop check decodes too
  const std::string prompt = "hello world";
  auto g = eval::generate(m, tok, {prompt}, opt, /*add_bos=*/false);
  ASSERT_EQ(g.size(), 1u);
  const auto ref = naive_greedy(m, tok.encode(prompt), 12);
  EXPECT_EQ(g[0].tokens, ref);
  std::string want;
  for (int32_t id : ref)
    if (id < 8) want += char('a' + id);
  EXPECT_EQ(g[0].text, want);
  EXPECT_TRUE(std::any_of(ref.begin(), ref.end(), [](int32_t id) { return id >= 8; }));  // the case is exercised
}

TEST(Generate, StopsAtEosAndStopCheck) {
  auto m = make(cfg_for("rope"));
  const auto prompt = random_tokens(10, 256, 41);
  auto ref = naive_greedy(m, prompt, 8);
  eval::GenerateOptions opt;
  opt.max_new_tokens = 8;
  // EOS = the 4th greedy token: generation ends before it.
  auto g = eval::generate_tokens(m, {prompt}, opt, ref[3]);
  size_t first = std::find(ref.begin(), ref.end(), ref[3]) - ref.begin();
  EXPECT_EQ(g[0].finish, "eos");
  EXPECT_EQ(g[0].tokens, std::vector<int32_t>(ref.begin(), ref.begin() + long(first)));
  // A stop check that fires after 2 tokens.
  auto s =
      eval::generate_tokens(m, {prompt}, opt, -1, [](size_t, const std::vector<int32_t>& t) { return t.size() == 2; });
  EXPECT_EQ(s[0].finish, "stop");
  EXPECT_EQ(s[0].tokens, std::vector<int32_t>(ref.begin(), ref.begin() + 2));
  opt.max_new_tokens = 0;
  EXPECT_TRUE(eval::generate_tokens(m, {prompt}, opt, -1)[0].tokens.empty());
  test::expect_error([&] { eval::generate_tokens(m, {{}}, opt, -1); }, {"prompt 0 is empty"});
  test::expect_error([&] { eval::generate_tokens(m, {{1, 999}}, opt, -1); }, {"999", "outside the vocabulary"});
}

// Sliding windows (docs/design.md#perplexity), recomputed here token by token from full-window log-probabilities.
TEST(Perplexity, SlidingWindowMatchesPerTokenDefinition) {
  auto m = make(cfg_for("rope"));
  const auto stream = random_tokens(100, 256, 51);
  const int64_t L = 32, S = 12;
  torch::NoGradGuard ng;
  std::vector<double> window_means;
  int64_t prev_end = 0, scored = 0;
  for (int64_t begin = 0; begin < 100; begin += S) {
    const int64_t end = std::min<int64_t>(begin + L, 100);
    auto lp = torch::log_softmax(m->forward(ids_of(stream).narrow(1, begin, end - begin)), -1)[0];
    double sum = 0;
    int64_t n = 0;
    for (int64_t t = std::max(prev_end, begin + 1); t < end; ++t, ++n)
      sum -= lp[t - begin - 1][stream[size_t(t)]].item<double>();
    window_means.push_back(sum / double(n));
    scored += n;
    prev_end = end;
    if (end == 100) break;
  }
  double mean = 0;
  for (double x : window_means) mean += x / double(window_means.size());
  eval::PerplexityOptions o;
  o.length = L;
  o.stride = S;
  auto r = eval::perplexity_sliding(m, stream, o);
  EXPECT_NEAR(r.mean_nll, mean, 1e-9);
  EXPECT_NEAR(r.ppl, std::exp(mean), 1e-9 * std::exp(mean));
  EXPECT_EQ(r.windows, int64_t(window_means.size()));
  EXPECT_EQ(r.tokens_scored, 99);  // every token but the first, exactly once
  EXPECT_EQ(scored, 99);
  o.max_windows = 2;
  EXPECT_EQ(eval::perplexity_sliding(m, stream, o).windows, 2);
}

TEST(Perplexity, ANonFiniteLossIsAnErrorNotNan) {
  auto m = make(cfg_for("rope"));
  {
    torch::NoGradGuard ng;
    m->named_parameters()["model.norm.weight"].fill_(NAN);
  }
  eval::PerplexityOptions o;
  o.length = 32;
  o.stride = 16;
  test::expect_error([&] { eval::perplexity_sliding(m, random_tokens(100, 256, 5), o); },
                     {"perplexity", "window 1 of", "non-finite loss"});
}

TEST(Perplexity, TruncateScoresFirstLTokensOfLongDocuments) {
  auto m = make(cfg_for("nope"));
  std::vector<std::vector<int32_t>> docs = {random_tokens(20, 256, 61), random_tokens(5, 256, 62),
                                            random_tokens(16, 256, 63)};
  eval::PerplexityOptions o;
  o.length = 16;
  o.truncate = true;
  auto r = eval::perplexity_truncate(m, docs, o);
  EXPECT_EQ(r.documents_used, 2);
  const double a = eval::window_nll(m, ids_of(docs[0]).narrow(1, 0, 16), 1);
  const double b = eval::window_nll(m, ids_of(docs[2]), 1);
  EXPECT_NEAR(r.ppl, std::exp((a + b) / 2), 1e-9 * r.ppl);
  o.length = 50;
  test::expect_error([&] { eval::perplexity_truncate(m, docs, o); }, {"no document has 50 tokens", "longest has 20"});
}

// Temperature fitting recovers a planted optimum: the fit's best β gives the lowest ppl on its grid,
// and c is the least-squares slope through the origin of (ln s, β − 1).
TEST(Perplexity, FitTemperatureIsConsistent) {
  auto c = cfg_for("nope");
  c.max_position = 16;
  auto m = make(c, torch::kFloat);
  const auto stream = random_tokens(130, 256, 71);
  eval::PerplexityOptions o;
  o.stride = 32;
  auto fit = eval::fit_temperature(m, stream, {32, 64}, o, 2.0);
  ASSERT_EQ(fit.lengths.size(), 2u);
  double num = 0, den = 0;
  for (size_t i = 0; i < 2; ++i) {
    for (double p : fit.grid_ppl[i]) EXPECT_GE(p, fit.best_ppl[i] - 1e-12);
    EXPECT_LE(fit.best_ppl[i], fit.base_ppl[i]);
    const double x = std::log(double(fit.lengths[i]) / 16.0);
    num += x * (fit.best_beta[i] - 1);
    den += x * x;
    // The reported best ppl is reproducible with the model's own temperature formula.
    m->set_softmax_temperature(fit.best_beta[i] > 1 ? (fit.best_beta[i] - 1) / x : 0.0);
    o.length = fit.lengths[i];
    EXPECT_NEAR(eval::perplexity_sliding(m, stream, o).ppl, fit.best_ppl[i], 1e-6 * fit.best_ppl[i]);
  }
  EXPECT_NEAR(fit.c, num / den, 1e-12);
  EXPECT_EQ(m->config().softmax_temperature, (fit.best_beta[1] - 1) / std::log(4.0));  // left as the test set it
  test::expect_error([&] { eval::fit_temperature(m, stream, {16}, o); }, {"not beyond the training length 16"});
}

// A length that cannot fit is refused up front with the estimate, before any allocation.
TEST(Perplexity, RefusesLengthsBeyondMemory) {
  auto c = cfg_for("rope");
  // micro: C = 64, F = 128, H = 4, D = 16, Hkv = 2, 4 layers → per token 6·64 + 2·4·16 + 3·128 = 896 activation
  // floats and 2·4·2·16 = 256 KV floats.
  EXPECT_DOUBLE_EQ(eval::forward_memory_bytes(c, 10, 10, 3), 4.0 * 30 * (896 + 256));
  ASSERT_GT(available_memory_bytes(), 0u);
  auto m = make(c, torch::kFloat);
  eval::PerplexityOptions o;
  o.length = int64_t(1) << 40;
  test::expect_error([&] { eval::perplexity_sliding(m, random_tokens(50, 256, 1), o); },
                     {"perplexity at length 1099511627776", "GiB", "use shorter lengths"});
  eval::GenerateOptions g;
  g.max_new_tokens = int64_t(1) << 40;  // bounded before it is added to the prompt length
  test::expect_error([&] { eval::generate_tokens(m, {{1, 2}}, g, -1); }, {"--max-new-tokens", "[0, 4194304]"});
  g.max_new_tokens = int64_t(1) << 22;  // 64 rows of 4M cached tokens: 256 GiB
  g.batch_size = 64;
  test::expect_error([&] { eval::generate_tokens(m, std::vector<std::vector<int32_t>>(64, {1, 2}), g, -1); },
                     {"generation", "GiB"});
}

// The cropped-context baseline (docs/design.md#statistics-protocol) against the plain path on an input cropped
// here: BOS then the last C − 1 tokens, the answer positions renumbered. A window one token off, or without BOS,
// gives other logits, so an off-by-one in the library's window cannot pass.
TEST(OffsetKeyCrop, LogitsEqualThePlainPathOnTheCroppedInput) {
  const auto c = cfg_for("rope");
  auto m = make(c);
  const int64_t C = c.max_position;
  const auto logits_of = [&](const std::vector<int64_t>& ids, std::vector<int64_t> pos) {
    torch::NoGradGuard no_grad;
    const int64_t n = int64_t(ids.size()), q = int64_t(pos.size());
    auto h = m->hidden(torch::tensor(ids, torch::kLong).view({1, n}));
    auto at = torch::tensor(pos, torch::kLong).view({1, q, 1}).expand({1, q, h.size(2)});
    return torch::matmul(h.gather(1, at), m->lm_head_weight().t())[0];
  };
  for (int64_t L : {int64_t(40), C}) {  // at L ≤ C the crop is the plain evaluation
    std::vector<tasks::OffsetKeySequence> seqs;
    for (uint64_t i = 0; i < 3; ++i) seqs.push_back(tasks::make_offset_key_sequence(5, i, L));
    EXPECT_TRUE(torch::equal(eval::offset_key_answer_logits(m, seqs, C), eval::offset_key_answer_logits(m, seqs)));
  }
  const int64_t L = 3 * C + 5;
  std::vector<tasks::OffsetKeySequence> seqs;
  for (uint64_t i = 0; i < 3; ++i) seqs.push_back(tasks::make_offset_key_sequence(5, i, L));
  const auto crop = eval::offset_key_answer_logits(m, seqs, C);
  ASSERT_EQ(crop.sizes(), (std::vector<int64_t>{3, 4, c.vocab_size}));
  EXPECT_GT((crop - eval::offset_key_answer_logits(m, seqs)).abs().max().item<double>(), 1e-3);
  for (size_t b = 0; b < seqs.size(); ++b) {
    const auto& t = seqs[b].tokens;
    std::vector<int64_t> pos;
    for (int64_t p : seqs[b].answer_positions) pos.push_back(p - (L - C));
    std::vector<int64_t> window{tasks::OffsetKeyVocab::bos};
    window.insert(window.end(), t.begin() + (L - C + 1), t.end());
    ASSERT_EQ(int64_t(window.size()), C);
    EXPECT_TRUE(torch::allclose(crop[int64_t(b)], logits_of(window, pos), 1e-9, 1e-9)) << b;
    // one token earlier: BOS, then tokens L − C … L − 2 (the last token dropped, the answers one position later)
    std::vector<int64_t> early{tasks::OffsetKeyVocab::bos};
    early.insert(early.end(), t.begin() + (L - C), t.end() - 1);
    std::vector<int64_t> later;
    for (int64_t p : pos) later.push_back(p + 1);
    EXPECT_GT((crop[int64_t(b)] - logits_of(early, later)).abs().max().item<double>(), 1e-3) << b;
    // the last C tokens without BOS
    std::vector<int64_t> no_bos(t.end() - C, t.end());
    EXPECT_GT((crop[int64_t(b)] - logits_of(no_bos, pos)).abs().max().item<double>(), 1e-3) << b;
  }
}
