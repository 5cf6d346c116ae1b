#include <filesystem>
#include <limits>
#include <map>

#include <torch/torch.h>

#include "drope/core/files.h"
#include "drope/eval/perplexity.h"
#include "drope/io/model_io.h"
#include "drope/model/variant.h"
#include "drope/ops/compute_weights.h"
#include "drope/tasks/offset_key.h"
#include "drope/train/adamw.h"
#include "drope/train/checkpoint.h"
#include "drope/train/lr_schedule.h"
#include "drope/train/run_config.h"
#include "drope/train/trainer.h"
#include "test_util.h"

using namespace drope;
using namespace drope::train;
namespace fs = std::filesystem;

TEST(Schedule, CosineWsdConstantWithWarmup) {
  ScheduleConfig c{ScheduleType::kCosine, 10, 110, 0.1, 0.2};
  EXPECT_DOUBLE_EQ(schedule_lr(c, 0, 1.0), 0.1);
  EXPECT_DOUBLE_EQ(schedule_lr(c, 9, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(schedule_lr(c, 10, 1.0), 1.0);
  EXPECT_NEAR(schedule_lr(c, 60, 1.0), 0.55, 1e-12);  // half way: floor + (1 − floor)/2
  EXPECT_NEAR(schedule_lr(c, 110, 1.0), 0.1, 1e-12);
  ScheduleConfig w{ScheduleType::kWsd, 10, 100, 0.0, 0.2};
  EXPECT_DOUBLE_EQ(schedule_lr(w, 50, 2.0), 2.0);
  EXPECT_DOUBLE_EQ(schedule_lr(w, 79, 2.0), 2.0);
  EXPECT_NEAR(schedule_lr(w, 90, 2.0), 1.0, 1e-12);
  EXPECT_NEAR(schedule_lr(w, 100, 2.0), 0.0, 1e-12);
  // wsd with a cosine decay (the public DroPE recipe's warmup_stable_decay, decay_type cosine, as transformers'
  // get_wsd_schedule: floor + (1 - floor) * (1 + cos(pi * progress)) / 2 over the decay steps).
  ScheduleConfig wc{ScheduleType::kWsd, 10, 100, 0.1, 0.2, DecayShape::kCosine};
  EXPECT_DOUBLE_EQ(schedule_lr(wc, 79, 2.0), 2.0);
  EXPECT_NEAR(schedule_lr(wc, 80, 2.0), 2.0, 1e-12);
  EXPECT_NEAR(schedule_lr(wc, 85, 2.0), 0.2 + 1.8 * 0.5 * (1.0 + std::cos(M_PI * 0.25)), 1e-12);
  EXPECT_NEAR(schedule_lr(wc, 90, 2.0), 1.1, 1e-12);
  EXPECT_NEAR(schedule_lr(wc, 100, 2.0), 0.2, 1e-12);
  ScheduleConfig k{ScheduleType::kConstant, 4, 100, 0.1, 0.2};
  EXPECT_DOUBLE_EQ(schedule_lr(k, 1, 1.0), 0.5);
  EXPECT_DOUBLE_EQ(schedule_lr(k, 99, 1.0), 1.0);
}

TEST(AdamW, MatchesLibTorchAdamW) {
  // Fused (LibTorch's _fused_adamw_, the default) and separate-ops updates against torch::optim::AdamW, with a
  // decayed matrix and a non-decayed vector.
  for (bool unfused : {false, true}) {
    torch::manual_seed(0);
    auto w = torch::randn({5, 4}, torch::requires_grad()), b = torch::randn({4}, torch::requires_grad());
    auto w_ref = w.detach().clone().requires_grad_(true), b_ref = b.detach().clone().requires_grad_(true);
    AdamWConfig cfg;
    cfg.lr = 1e-2;
    cfg.weight_decay = 0.1;
    AdamW ours({{"layer.weight", w}, {"layer.bias", b}}, cfg);
    ours.set_force_unfused(unfused);
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(std::vector<torch::Tensor>{w_ref},
                        std::make_unique<torch::optim::AdamWOptions>(
                            torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1)));
    groups.emplace_back(std::vector<torch::Tensor>{b_ref},
                        std::make_unique<torch::optim::AdamWOptions>(
                            torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0)));
    torch::optim::AdamW ref(std::move(groups), torch::optim::AdamWOptions(1e-2));
    for (int s = 0; s < 6; ++s) {
      auto g = torch::randn({5, 4}), gb = torch::randn({4});
      w.mutable_grad() = g.clone();
      w_ref.mutable_grad() = g.clone();
      b.mutable_grad() = gb.clone();
      b_ref.mutable_grad() = gb.clone();
      ours.step(1e-2);
      ref.step();
    }
    SCOPED_TRACE(unfused ? "separate ops" : "fused");
    EXPECT_LT((w - w_ref).abs().max().item<double>(), 1e-6);
    EXPECT_LT((b - b_ref).abs().max().item<double>(), 1e-6);
  }
  AdamW ours({}, AdamWConfig{});
  // No decay on vectors and embeddings by default.
  EXPECT_FALSE(ours.decays("model.norm.weight", torch::ones({4})));
  EXPECT_FALSE(ours.decays("model.embed_tokens.weight", torch::ones({4, 4})));
  EXPECT_TRUE(ours.decays("model.layers.0.mlp.up_proj.weight", torch::ones({4, 4})));
}

namespace {
std::string write_cfg(const std::string& dir, const std::string& extra = "") {
  const std::string text = "run: {name: t, out_dir: " + dir +
                           "/run, seed: 3}\n"
                           "model: {preset: micro, max_position: 32}\n"
                           "data: {text: /usr/share/common-licenses/GPL-3, seq_len: 32, batch_size: 4}\n"
                           "optim: {lr: 3.0e-3}\n"
                           "schedule: {type: cosine, warmup: 2, steps: 6}\n"
                           "train: {steps: 6, log_every: 1, eval_batches: 2}\n" +
                           extra;
  write_file_atomic(dir + "/cfg.yaml", text);
  return dir + "/cfg.yaml";
}
}  // namespace

TEST(RunConfig, StrictWithOverridesAndRoundTrip) {
  auto d = test::tmp_dir("runcfg");
  auto cfg = load_run_config(write_cfg(d), {"train.steps=9", "optim.betas=[0.8, 0.9]", "model.positional.type=nope"});
  EXPECT_EQ(cfg.train.steps, 9);
  EXPECT_EQ(cfg.optim.beta1, 0.8);
  EXPECT_EQ(cfg.model.positional.type, PositionalType::kNope);
  write_file_atomic(d + "/rt.yaml", run_config_to_yaml(cfg));
  EXPECT_EQ(run_config_to_yaml(load_run_config(d + "/rt.yaml")), run_config_to_yaml(cfg));
  test::expect_error([&] { load_run_config(write_cfg(d), {"train.stepz=3"}); },
                     {"cfg.yaml", "train.stepz", "unknown key"});
  test::expect_error([&] { load_run_config(write_cfg(d), {"nodot"}); }, {"--set 'nodot'"});
  test::expect_error([&] { load_run_config(write_cfg(d), {"run.phase=drope"}); }, {"run.init"});
  test::expect_error([&] { load_run_config(write_cfg(d, "trian: {steps: 3}\n")); }, {"cfg.yaml:7", "'trian'"});
}

// yaml-cpp gives an alias its anchor's node: --set on one name must not change the others.
TEST(RunConfig, SetThroughAnAliasChangesOnlyTheKeyItNames) {
  auto d = test::tmp_dir("runcfg_alias");
  const std::string text = "run: {name: t, out_dir: " + d +
                           "/run}\n"
                           "model: {preset: micro, max_position: &n 32}\n"
                           "data: {text: /usr/share/common-licenses/GPL-3, seq_len: *n, batch_size: 4}\n"
                           "train: &t {steps: 6}\n"
                           "schedule: *t\n";
  write_file_atomic(d + "/alias.yaml", text);
  const auto cfg = load_run_config(d + "/alias.yaml", {"data.seq_len=16", "train.steps=9"});
  EXPECT_EQ(cfg.data.seq_len, 16);
  EXPECT_EQ(cfg.model.max_position, 32);
  EXPECT_EQ(cfg.train.steps, 9);
  EXPECT_EQ(cfg.schedule.steps, 6);
  // A key added under one name of a shared mapping is not added under the other.
  EXPECT_EQ(load_run_config(d + "/alias.yaml", {"schedule.warmup=2"}).schedule.warmup, 2);
}

// A --set key is named as one: not at a made-up line 0 of the file; an empty key or value is refused, not a
// section dropped.
TEST(RunConfig, SetKeysAndEmptyValuesAreNamed) {
  auto d = test::tmp_dir("runcfg_setkeys");
  try {
    load_run_config(write_cfg(d), {"trian.steps=3"});
    ADD_FAILURE() << "accepted trian.steps";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unknown key 'trian' (given with --set"), std::string::npos) << m;
    EXPECT_EQ(m.find(":0:0"), std::string::npos) << m;
  }
  test::expect_error([&] { load_run_config(write_cfg(d), {"train=~"}); }, {"--set 'train=~'", "no value"});
  test::expect_error([&] { load_run_config(write_cfg(d), {"train="}); }, {"--set 'train='", "no value"});
  test::expect_error([&] { load_run_config(write_cfg(d), {"train..steps=1"}); },
                     {"--set 'train..steps=1'", "empty key"});
  test::expect_error([&] { load_run_config(write_cfg(d), {".=1"}); }, {"--set '.=1'", "empty key"});
}

// List elements get the scalars' checks: 095 is octal to some YAML readers, decimal to others.
TEST(RunConfig, ListElementsWithALeadingZeroAreRefused) {
  auto d = test::tmp_dir("runcfg_zero");
  test::expect_error([&] { load_run_config(write_cfg(d), {"optim.betas=[0.9, 095]"}); },
                     {"optim.betas", "element 1", "'095'", "leading zero"});
  test::expect_error([&] { load_run_config(write_cfg(d), {"train.steps=0012"}); }, {"train.steps", "leading zero"});
}

// The trainer learns real text: byte-level GPL-3, micro model, 300 steps. The loss starts near uniform and ends
// well below the unigram entropy (a model that ignores context), and DroPE keeps what was learnt.
TEST(Trainer, LearnsRealTextWellBelowUnigramEntropy) {
  torch::set_num_threads(1);  // ctest runs tests in parallel on 2 cores
  const std::string text = read_file("/usr/share/common-licenses/GPL-3");
  ASSERT_GT(text.size(), 20000u) << "needs /usr/share/common-licenses (base-files)";
  std::vector<double> counts(256, 0.0);
  for (unsigned char c : text) counts[c] += 1;
  double h1 = 0;
  for (double n : counts)
    if (n > 0) h1 -= n / double(text.size()) * std::log(n / double(text.size()));
  auto d = test::tmp_dir("learns");
  auto cfg = load_run_config(write_cfg(d), {"train.steps=300", "schedule.steps=300", "schedule.warmup=20",
                                            "data.batch_size=16", "optim.lr=1.0e-2", "train.eval_batches=4"});
  TrainOptions o;
  o.quiet = true;
  o.run_yaml = run_config_to_yaml(cfg);
  const auto r = Trainer(cfg, o).run();
  ASSERT_EQ(r.losses.size(), 300u);
  EXPECT_GT(r.losses.front().second, std::log(256.0) - 0.5);  // starts near uniform
  double tail = 0;
  for (size_t i = 290; i < 300; ++i) tail += r.losses[i].second / 10;
  EXPECT_LT(tail, h1 - 0.5) << "unigram entropy " << h1;
  EXPECT_LT(r.val_loss, h1 - 0.5);
  // DroPE keeps the weights: the dropped model (no recalibration) still beats a context-free model's
  // uniform baseline, so recalibration starts from a trained model, not from scratch.
  auto trained = io::load_model(r.last_checkpoint);
  auto dropped = apply_variant(trained, parse_variant("drope+qk", "test"), r.last_checkpoint);
  dropped->eval();
  torch::NoGradGuard ng;
  std::vector<int64_t> ids;
  for (size_t i = 0; i < 32; ++i) ids.push_back(static_cast<unsigned char>(text[1000 + i]));
  const double nll = eval::window_nll(dropped, torch::tensor(ids, torch::kLong).view({1, -1}), 1);
  EXPECT_LT(nll, std::log(256.0) - 0.5);
}

TEST(Trainer, ResumeIsBitwiseIdenticalOnCpu) {
  torch::set_num_threads(1);
  auto d = test::tmp_dir("resume");
  TrainOptions o;
  o.quiet = true;
  fs::create_directories(d + "/a");
  auto full_cfg = load_run_config(write_cfg(d + "/a"));
  o.run_yaml = run_config_to_yaml(full_cfg);
  auto full = Trainer(full_cfg, o).run();
  ASSERT_EQ(full.losses.size(), 6u);
  EXPECT_LT(full.losses.back().second, full.losses.front().second);
  // The same run interrupted after 3 steps, then resumed.
  fs::create_directories(d + "/b");
  auto part_cfg = load_run_config(write_cfg(d + "/b"), {"train.steps=3"});
  Trainer(part_cfg, o).run();
  ASSERT_TRUE(latest_checkpoint(part_cfg.out_dir).has_value());
  auto rest_cfg = load_run_config(write_cfg(d + "/b"));
  o.resume = true;
  auto rest = Trainer(rest_cfg, o).run();
  EXPECT_EQ(rest.resumed_from, 3);
  ASSERT_EQ(rest.losses.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(rest.losses[i].first, full.losses[3 + i].first);
    EXPECT_EQ(rest.losses[i].second, full.losses[3 + i].second) << "step " << rest.losses[i].first;  // bitwise
  }
  auto a = io::load_model(full.last_checkpoint), b = io::load_model(rest.last_checkpoint);
  auto pb = b->named_parameters();
  for (const auto& kv : a->named_parameters()) EXPECT_TRUE(torch::equal(kv.value(), pb[kv.key()])) << kv.key();
  EXPECT_EQ(full.val_loss, rest.val_loss);
}

TEST(Trainer, CheckpointsKeepLastAndRejectOtherShapes) {
  torch::set_num_threads(1);
  auto d = test::tmp_dir("ckpt");
  auto cfg = load_run_config(write_cfg(d), {"train.checkpoint_every=1", "train.keep_last=2", "train.steps=4"});
  TrainOptions o;
  o.quiet = true;
  o.run_yaml = run_config_to_yaml(cfg);
  Trainer(cfg, o).run();
  int n = 0;
  for (const auto& e : fs::directory_iterator(cfg.out_dir + "/checkpoints")) {
    ++n;
    EXPECT_TRUE(fs::exists(e.path() / "state.json")) << e.path();
  }
  EXPECT_EQ(n, 2);
  EXPECT_EQ(*latest_checkpoint(cfg.out_dir), cfg.out_dir + "/checkpoints/step-00000004");
  auto other = load_run_config(write_cfg(d), {"model.hidden_size=96", "model.head_dim=24"});
  o.resume = true;
  test::expect_error([&] { Trainer(other, o).run(); },
                     {"step-00000004", "run.yaml", "resuming would change model.hidden_size from 64 to 96"});
}

TEST(Trainer, DropAtStepSwitchesToNoPEAndKeepsTraining) {
  torch::set_num_threads(1);
  auto d = test::tmp_dir("dropat");
  auto cfg = load_run_config(write_cfg(d), {"drope.drop_at_step=3", "drope.qk_norm=qk"});
  TrainOptions o;
  o.quiet = true;
  o.run_yaml = run_config_to_yaml(cfg);
  auto r = Trainer(cfg, o).run();
  ASSERT_EQ(r.losses.size(), 6u);
  auto m = io::load_model(r.last_checkpoint);
  EXPECT_EQ(m->config().positional.type, PositionalType::kNope);
  EXPECT_EQ(m->config().qk_norm, QkNorm::kQk);
  EXPECT_TRUE(std::isfinite(r.val_loss));
}

TEST(Trainer, Bf16AutocastTrainsAndDiffersFromFloat32) {
  torch::set_num_threads(1);
  auto d = test::tmp_dir("bf16");
  fs::create_directories(d + "/a");
  fs::create_directories(d + "/b");
  TrainOptions o;
  o.quiet = true;
  auto f32 = Trainer(load_run_config(write_cfg(d + "/a")), o).run();
  auto b16 = Trainer(load_run_config(write_cfg(d + "/b"), {"train.dtype=bfloat16"}), o).run();
  ASSERT_EQ(b16.losses.size(), 6u);
  EXPECT_LT(b16.losses.back().second, b16.losses.front().second);
  if (ops::bf16_pays(c10::DeviceType::CPU)) {
    EXPECT_NE(b16.losses.back().second, f32.losses.back().second);  // the forward really ran in bf16
    EXPECT_NEAR(b16.losses.back().second, f32.losses.back().second, 0.1);
  } else {
    // No AMX tiles or AVX512-BF16 in use: the run says so and computes in float32, the same run bit for bit.
    EXPECT_EQ(b16.losses.back().second, f32.losses.back().second);
  }
}

// Step hooks: called before every step, on every micro-batch's loss and after every update. A hook that
// leaves the loss alone changes nothing (same losses bit for bit as a run without it); one that makes a loss
// NaN gets that step skipped: no update, no loss recorded, counted in the checkpoint's state.
TEST(Trainer, StepHooksRunAroundEveryStepAndCanSkipOne) {
  torch::set_num_threads(1);
  struct Recorder final : StepHook {
    std::vector<int64_t> before, after;
    std::map<int64_t, int> losses;
    void before_step(Trainer& t, int64_t step) override {
      EXPECT_EQ(t.state().step, step - 1);
      before.push_back(step);
    }
    torch::Tensor on_loss(int64_t step, const torch::Tensor& loss) override {
      ++losses[step];
      return step == 3 ? loss * std::numeric_limits<double>::quiet_NaN() : loss;
    }
    void after_update(Trainer&, int64_t step) override { after.push_back(step); }
  };
  auto d = test::tmp_dir("hooks");
  fs::create_directories(d + "/a");
  fs::create_directories(d + "/b");
  TrainOptions o;
  o.quiet = true;
  const auto plain = Trainer(load_run_config(write_cfg(d + "/a"), {"data.micro_batch=2"}), o).run();
  Trainer trainer(load_run_config(write_cfg(d + "/b"), {"data.micro_batch=2"}), o);
  auto hook = std::make_unique<Recorder>();
  Recorder* rec = hook.get();
  trainer.add_hook(std::move(hook));
  const auto r = trainer.run();
  EXPECT_EQ(rec->before, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(rec->after, (std::vector<int64_t>{1, 2, 4, 5, 6}));
  for (int64_t s = 1; s <= 6; ++s) EXPECT_EQ(rec->losses[s], 2) << "step " << s;  // accumulation 4 / (2 x 1)
  ASSERT_EQ(plain.losses.size(), 6u);
  ASSERT_EQ(r.losses.size(), 5u);
  for (size_t i = 0; i < 2; ++i) EXPECT_EQ(r.losses[i], plain.losses[i]);
  EXPECT_EQ(r.losses[2].first, 4);
  const auto c = load_checkpoint(r.last_checkpoint);
  EXPECT_EQ(c.state.step, 6);
  EXPECT_EQ(c.state.skipped, 1);
  EXPECT_EQ(c.optimizer_steps, 5);
}

// data.task: offset-key trains on generated sequences with loss on the answers only: the first step's loss
// (initial weights) equals the cross-entropy of the answers alone, computed here from the full logits of the
// same sequences (train split, run seed); validation uses the held-out split.
TEST(Trainer, OffsetKeyTaskLossIsOnTheAnswersOnly) {
  torch::set_num_threads(1);
  auto d = test::tmp_dir("offsetkey");
  const std::string text = "run: {name: t, out_dir: " + d +
                           "/run, seed: 5}\n"
                           "model: {preset: micro, vocab_size: 256, max_position: 32}\n"
                           "data: {task: offset-key, seq_len: 32, batch_size: 4}\n"
                           "optim: {lr: 3.0e-3}\n"
                           "schedule: {type: cosine, warmup: 2, steps: 3}\n"
                           "train: {steps: 3, log_every: 1, eval_batches: 2}\n";
  write_file_atomic(d + "/cfg.yaml", text);
  auto cfg = load_run_config(d + "/cfg.yaml");
  EXPECT_EQ(cfg.data.task, "offset-key");
  write_file_atomic(d + "/rt.yaml", run_config_to_yaml(cfg));
  EXPECT_EQ(load_run_config(d + "/rt.yaml").data.task, "offset-key");
  TrainOptions o;
  o.quiet = true;
  o.run_yaml = run_config_to_yaml(cfg);
  const auto r = Trainer(cfg, o).run();
  ASSERT_EQ(r.losses.size(), 3u);
  EXPECT_TRUE(std::isfinite(r.val_loss));

  DecoderLM model(cfg.model);
  model->reset_parameters(cfg.seed);
  torch::NoGradGuard ng;
  double sum = 0, all_targets = 0;
  int64_t n = 0;
  for (int64_t b = 0; b < 4; ++b) {
    const auto s =
        tasks::make_offset_key_sequence(5, tasks::offset_key_index(tasks::OffsetKeySplit::train, uint64_t(b)), 33);
    auto ids = torch::tensor(s.tokens, torch::kLong).view({1, -1});
    auto logp = torch::log_softmax(model->forward(ids.narrow(1, 0, 32)).to(torch::kDouble), -1)[0];  // (32, V)
    for (size_t q = 0; q < s.answers.size(); ++q, ++n) sum -= logp[s.answer_positions[q]][s.answers[q]].item<double>();
    for (int64_t t = 0; t < 32; ++t) all_targets -= logp[t][s.tokens[size_t(t + 1)]].item<double>() / (4 * 32);
  }
  EXPECT_EQ(n, 16);
  EXPECT_NEAR(r.losses.front().second, sum / double(n), 1e-4);
  EXPECT_GT(std::abs(all_targets - sum / double(n)), 1e-3);  // the unmasked loss would be told apart

  test::expect_error([&] { load_run_config(d + "/cfg.yaml", {"data.task=needles"}); }, {"data.task", "needles"});
  test::expect_error([&] { load_run_config(d + "/cfg.yaml", {"data.text=/usr/share/common-licenses/GPL-3"}); },
                     {"exactly one of data.dataset, data.text or data.task"});
  test::expect_error([&] { load_run_config(d + "/cfg.yaml", {"data.seq_len=8"}); }, {"data.seq_len"});
}

TEST(AdamW, FusedKernelWithinOneUlpOfSeparateOps) {
  // optim.fused: LibTorch's _fused_adamw_ against our separate-ops update, one step from the same state (float32
  // moments and parameters, with and without decay, steps 1 and 37): the parameters and exp_avg_sq within one
  // float32 ulp, exp_avg bitwise equal.
  auto ulps = [](const torch::Tensor& a, const torch::Tensor& b) {
    return (a.view(torch::kInt).to(torch::kLong) - b.view(torch::kInt).to(torch::kLong)).abs().max().item<int64_t>();
  };
  for (int64_t steps : {0, 36}) {
    torch::manual_seed(7 + steps);
    const auto w0 = torch::randn({33, 17}), b0 = torch::randn({257});
    const auto gw = torch::randn({33, 17}), gb = torch::randn({257});
    const std::map<std::string, torch::Tensor> state{{"exp_avg.l.weight", torch::randn({33, 17}) * 0.1},
                                                     {"exp_avg_sq.l.weight", torch::rand({33, 17}) * 0.01},
                                                     {"exp_avg.l.bias", torch::randn({257}) * 0.1},
                                                     {"exp_avg_sq.l.bias", torch::rand({257}) * 0.01}};
    std::vector<torch::Tensor> out[2];
    for (int fused = 0; fused < 2; ++fused) {
      auto w = w0.clone(), b = b0.clone();
      AdamWConfig cfg;
      cfg.fused = fused == 1;
      AdamW opt({{"l.weight", w}, {"l.bias", b}}, cfg);
      opt.load_state(state, steps, "test");
      w.mutable_grad() = gw.clone();
      b.mutable_grad() = gb.clone();
      opt.step(3e-4);
      out[fused] = {w, b};
      for (const auto& [name, t] : opt.state_tensors()) out[fused].push_back(t);
    }
    const char* what[] = {"weight", "bias", "exp_avg.weight", "exp_avg_sq.weight", "exp_avg.bias", "exp_avg_sq.bias"};
    for (size_t i = 0; i < out[0].size(); ++i) {
      const int64_t u = ulps(out[0][i], out[1][i]);
      EXPECT_LE(u, std::string(what[i]).rfind("exp_avg.", 0) == 0 ? 0 : 1) << what[i] << " step " << steps + 1;
    }
  }
}

TEST(RunConfig, NamedSettingsParseIntoTheirEnums) {
  const std::string d = test::tmp_dir("named_settings");
  auto cfg = load_run_config(
      write_cfg(d), {"schedule.type=wsd", "schedule.decay_shape=cosine", "train.dtype=bfloat16", "train.device=cpu"});
  EXPECT_EQ(cfg.schedule.type, ScheduleType::kWsd);
  EXPECT_EQ(cfg.schedule.decay_shape, DecayShape::kCosine);
  EXPECT_EQ(cfg.train.dtype, TrainDType::kBFloat16);
  EXPECT_EQ(cfg.train.device, TrainDevice::kCpu);
  // The resolved config writes the YAML spellings back.
  const std::string yaml = run_config_to_yaml(cfg);
  for (const char* line : {"type: wsd", "decay_shape: cosine", "dtype: bfloat16", "device: cpu"})
    EXPECT_NE(yaml.find(line), std::string::npos) << line << " in\n" << yaml;
  write_file_atomic(d + "/rt.yaml", yaml);
  EXPECT_EQ(run_config_to_yaml(load_run_config(d + "/rt.yaml")), yaml);
  // A bad value: one line naming the key and every allowed value.
  const std::vector<std::pair<std::string, std::vector<std::string>>> bad = {
      {"schedule.type=linear", {"schedule.type", "cosine, wsd, constant", "'linear'"}},
      {"schedule.decay_shape=step", {"schedule.decay_shape", "linear, cosine", "'step'"}},
      {"train.dtype=float16", {"train.dtype", "float32, bfloat16", "'float16'"}},
      {"train.device=tpu", {"train.device", "auto, cpu, cuda", "'tpu'"}},
  };
  for (const auto& [set, needles] : bad) {
    try {
      load_run_config(write_cfg(d), {set});
      ADD_FAILURE() << set << " was accepted";
    } catch (const Error& e) {
      const std::string msg = e.what();
      for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << msg << "\nmissing: " << n;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(RunConfig, FusedStepKeysAndCudaGraphsOnTheCpu) {
  const std::string d = test::tmp_dir("fused_keys");
  auto cfg = load_run_config(write_cfg(d), {"train.fused_loss=false", "optim.fused=false"});
  EXPECT_FALSE(cfg.train.fused_loss);
  EXPECT_FALSE(cfg.optim.fused);
  EXPECT_FALSE(cfg.train.cuda_graphs);
  write_file_atomic(d + "/rt.yaml", run_config_to_yaml(cfg));
  EXPECT_EQ(run_config_to_yaml(load_run_config(d + "/rt.yaml")), run_config_to_yaml(cfg));
  test::expect_error([&] { load_run_config(write_cfg(d), {"train.cuda_graphs=true", "train.device=cpu"}); },
                     {"train.cuda_graphs", "CUDA"});
  // What a captured step cannot hold is refused at load, one line naming the key and the reason.
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{}, "train.chunked_loss: false"},
      {{"data.micro_batch=2"}, "data.micro_batch"},
      {{"train.shard=optimizer"}, "train.shard: none"},
      {{"train.activation_checkpointing=full"}, "train.activation_checkpointing: none"},
      {{"drope.drop_at_step=2"}, "drope.drop_at_step"},
  };
  for (const auto& [extra, why] : refused) {
    std::vector<std::string> sets = {"train.cuda_graphs=true", "train.device=cuda"};
    if (why != "train.chunked_loss: false") sets.push_back("train.chunked_loss=false");
    sets.insert(sets.end(), extra.begin(), extra.end());
    test::expect_error([&] { load_run_config(write_cfg(d), sets); }, {"cfg.yaml", "train.cuda_graphs: true", why});
  }
  auto ok = load_run_config(
      write_cfg(d), {"train.cuda_graphs=true", "train.device=cuda", "train.chunked_loss=false", "data.micro_batch=4"});
  EXPECT_TRUE(ok.train.cuda_graphs);
}
