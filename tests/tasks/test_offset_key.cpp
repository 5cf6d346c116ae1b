// Offset-key retrieval: determinism, layout invariants, the distributions of the draws
// (chi-square at a fixed 1e-4 false-alarm level), the loss mask and batch filler, the scorer and bad input.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "drope/tasks/offset_key.h"
#include "test_util.h"

namespace drope::tasks {
namespace {

using V = OffsetKeyVocab;
using test::expect_error;

// Pearson's statistic of `counts` against equal expected counts.
double chi_square_uniform(const std::vector<int64_t>& counts) {
  double n = 0;
  for (auto c : counts) n += double(c);
  const double e = n / double(counts.size());
  double x = 0;
  for (auto c : counts) x += (double(c) - e) * (double(c) - e) / e;
  return x;
}

// Upper 1e-4 quantiles of the chi-square distribution, computed with
//   python -c "from scipy.stats import chi2; print(chi2.isf(1e-4, df))"
// (scipy 1.x): a uniform draw fails a test with probability 1e-4 (and the seeds are fixed, so never flakily).
constexpr double kChi2_1e4_df15 = 44.2632;
constexpr double kChi2_1e4_df23 = 57.0746;
constexpr double kChi2_1e4_df50 = 95.9687;
constexpr double kChi2_1e4_df125 = 192.5113;

TEST(OffsetKeyVocab, LayoutFitsIn256AndIsDisjoint) {
  EXPECT_EQ(V::size, 196);
  EXPECT_LE(V::size, 256);
  std::set<int64_t> ids = {V::bos, V::sep};
  for (int64_t c = 0; c < V::kColours; ++c) {
    ids.insert(V::query(c));
    for (int64_t k = 0; k < V::kValuesPerColour; ++k) {
      ids.insert(V::value(c, k));
      EXPECT_EQ(V::colour_of(V::value(c, k)), c);
      EXPECT_TRUE(V::is_value(V::value(c, k)));
    }
  }
  for (int64_t k = 0; k < V::kFillers; ++k) {
    ids.insert(V::filler(k));
    EXPECT_TRUE(V::is_filler(V::filler(k)));
    EXPECT_EQ(V::colour_of(V::filler(k)), -1);
  }
  EXPECT_EQ(int64_t(ids.size()), V::size);  // every id used once
  EXPECT_EQ(*ids.begin(), 0);
  EXPECT_EQ(*ids.rbegin(), V::size - 1);
  EXPECT_FALSE(V::is_value(V::sep));
  EXPECT_FALSE(V::is_value(V::query(3)));
}

TEST(OffsetKeyVocab, TooSmallVocabularyFailsNamingTheNeed) {
  check_offset_key_vocab(256, "--model m");
  check_offset_key_vocab(V::size, "--model m");
  expect_error([] { check_offset_key_vocab(128, "--model /tmp/m"); },
               {"--model /tmp/m: ", "at least 196 token ids", "the model has 128"});
}

TEST(OffsetKeySequence, TooShortFailsNamingTheMinimum) {
  EXPECT_EQ(kOffsetKeyMinLength, 17);
  (void)make_offset_key_sequence(1, 0, 17);
  for (int64_t L : {-1, 0, 12, 16}) {
    expect_error([&] { (void)make_offset_key_sequence(1, 0, L); },
                 {"offset-key sequence length: ", "at least 17 tokens", "query block", "got " + std::to_string(L)});
  }
  expect_error([] { check_offset_key_length(5, "--lengths"); }, {"--lengths: ", "got 5"});
}

TEST(OffsetKeySequence, Deterministic) {
  for (int64_t L : {17, 64, 300}) {
    const auto a = make_offset_key_sequence(7, 3, L), b = make_offset_key_sequence(7, 3, L);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.answers, b.answers);
    EXPECT_EQ(a.needle_positions, b.needle_positions);
    EXPECT_EQ(a.seed, b.seed);
    EXPECT_NE(a.tokens, make_offset_key_sequence(7, 4, L).tokens);
    EXPECT_NE(a.tokens, make_offset_key_sequence(8, 3, L).tokens);
  }
  // Fixed values: the generator's output must not drift across platforms or refactorings.
  // (Recorded from this implementation; a change here changes every dataset and evaluation.)
  const auto s = make_offset_key_sequence(42, 0, 32);
  EXPECT_EQ(s.tokens, (std::vector<int64_t>{0,   84,  116, 56,  77, 123, 85, 40, 113, 173, 85, 6,  32, 158, 98, 119,
                                            136, 118, 134, 190, 2,  69,  32, 1,  69,  6,   4,  69, 56, 3,   69, 40}));
  EXPECT_EQ(s.needle_positions, (std::vector<int64_t>{12, 11, 3, 7}));
  EXPECT_EQ(s.colours, (std::vector<int64_t>{1, 0, 3, 2}));
  EXPECT_EQ(s.answer_positions, (std::vector<int64_t>{21, 24, 27, 30}));
  EXPECT_EQ(s.distances, (std::vector<int64_t>{9, 13, 24, 23}));
  // Splits of the index space never meet.
  EXPECT_NE(offset_key_index(OffsetKeySplit::train, 5), offset_key_index(OffsetKeySplit::test, 5));
  EXPECT_EQ(offset_key_index(OffsetKeySplit::train, 5), 5u);
  EXPECT_EQ(offset_key_index(OffsetKeySplit::test, 0) >> 62, 2u);
  expect_error([] { (void)offset_key_index(OffsetKeySplit::heldout, uint64_t(1) << 62); }, {"2^62"});
  std::set<std::vector<int64_t>> seen;
  for (uint64_t i = 0; i < 200; ++i) seen.insert(make_offset_key_sequence(1, i, 40).tokens);
  EXPECT_EQ(seen.size(), 200u);
}

void check_layout(const OffsetKeySequence& s, int64_t L) {
  ASSERT_EQ(int64_t(s.tokens.size()), L);
  const int64_t body_end = L - kOffsetKeyQueryTokens;  // body = [1, body_end)
  EXPECT_EQ(s.tokens[0], V::bos);
  // Exactly one value per colour in the body, everything else filler.
  std::map<int64_t, int64_t> per_colour;
  for (int64_t t = 1; t < body_end; ++t) {
    const auto id = s.tokens[size_t(t)];
    if (V::is_value(id)) ++per_colour[V::colour_of(id)];
    else ASSERT_TRUE(V::is_filler(id)) << "position " << t << " id " << id;
  }
  ASSERT_EQ(per_colour.size(), size_t(V::kColours));
  for (const auto& [c, n] : per_colour) EXPECT_EQ(n, 1) << "colour " << c;
  // The query block: Q_c SEP v_c per colour, every colour once.
  ASSERT_EQ(s.answers.size(), size_t(V::kColours));
  std::set<int64_t> colours;
  for (size_t q = 0; q < s.answers.size(); ++q) {
    const int64_t t = body_end + 3 * int64_t(q), c = s.colours[q];
    colours.insert(c);
    EXPECT_EQ(s.tokens[size_t(t)], V::query(c));
    EXPECT_EQ(s.tokens[size_t(t + 1)], V::sep);
    EXPECT_EQ(s.answer_positions[q], t + 1);
    EXPECT_EQ(s.tokens[size_t(t + 2)], s.answers[q]);
    EXPECT_EQ(V::colour_of(s.answers[q]), c);
    // The needle: in the body, the same token as the answer.
    const int64_t p = s.needle_positions[q];
    EXPECT_GE(p, 1);
    EXPECT_LT(p, body_end);
    EXPECT_EQ(s.tokens[size_t(p)], s.answers[q]);
    EXPECT_EQ(s.distances[q], t + 1 - p);
    EXPECT_GE(s.distances[q], 2);
    EXPECT_LE(s.distances[q], L - 3);
  }
  EXPECT_EQ(colours.size(), size_t(V::kColours));
  // No query marker, BOS or SEP elsewhere.
  int64_t seps = 0, bos = 0;
  for (auto id : s.tokens) seps += id == V::sep, bos += id == V::bos;
  EXPECT_EQ(seps, V::kColours);
  EXPECT_EQ(bos, 1);
}

TEST(OffsetKeySequence, LayoutInvariantsForManyLengths) {
  for (int64_t L = kOffsetKeyMinLength; L <= 80; ++L)
    for (uint64_t i = 0; i < 50; ++i) check_layout(make_offset_key_sequence(3, i, L), L);
  for (int64_t L : {128, 256, 512, 1000, 1024, 4096})
    for (uint64_t i = 0; i < 5; ++i) check_layout(make_offset_key_sequence(11, i, L), L);
}

TEST(OffsetKeySequence, ShortestSequenceUsesTheWholeBody) {
  // L = 17: a body of 4 positions, so the needles fill it.
  const auto s = make_offset_key_sequence(5, 0, 17);
  check_layout(s, 17);
  std::vector<int64_t> p = s.needle_positions;
  std::sort(p.begin(), p.end());
  EXPECT_EQ(p, (std::vector<int64_t>{1, 2, 3, 4}));
}

// 20,000 sequences of length 64 (a body of 51 positions).
TEST(OffsetKeyDistributions, NeedlesQueriesFillersAndValuesAreUniform) {
  const int64_t L = 64, body = L - 1 - kOffsetKeyQueryTokens, n = 20000;
  std::vector<int64_t> pos(size_t(body), 0), fill(size_t(V::kFillers), 0), value(size_t(V::kValuesPerColour), 0);
  std::vector<std::vector<int64_t>> pos_colour(size_t(V::kColours), std::vector<int64_t>(size_t(body), 0));
  std::map<std::vector<int64_t>, int64_t> orders;
  std::vector<std::vector<int64_t>> slot(size_t(V::kColours), std::vector<int64_t>(size_t(V::kColours), 0));
  for (int64_t i = 0; i < n; ++i) {
    const auto s = make_offset_key_sequence(2024, uint64_t(i), L);
    for (size_t q = 0; q < s.answers.size(); ++q) {
      ++pos[size_t(s.needle_positions[q] - 1)];
      ++pos_colour[size_t(s.colours[q])][size_t(s.needle_positions[q] - 1)];
      ++value[size_t((s.answers[q] - V::value_first) % V::kValuesPerColour)];
      ++slot[q][size_t(s.colours[q])];
    }
    ++orders[s.colours];
    for (int64_t t = 1; t <= body; ++t)
      if (V::is_filler(s.tokens[size_t(t)])) ++fill[size_t(s.tokens[size_t(t)] - V::filler_first)];
  }
  // Needle positions: pooled and per colour (51 bins, df 50). The pooled counts are slightly
  // under-dispersed (the 4 positions of a sequence are distinct), which only makes the test conservative.
  EXPECT_LT(chi_square_uniform(pos), kChi2_1e4_df50);
  for (const auto& pc : pos_colour) EXPECT_LT(chi_square_uniform(pc), kChi2_1e4_df50);
  // Query order: all 24 permutations, uniformly (df 23).
  ASSERT_EQ(orders.size(), 24u);
  std::vector<int64_t> order_counts;
  for (const auto& [o, c] : orders) order_counts.push_back(c);
  EXPECT_LT(chi_square_uniform(order_counts), kChi2_1e4_df23);
  for (const auto& row : slot) EXPECT_EQ(row[0] + row[1] + row[2] + row[3], n);
  // Filler tokens (126, df 125) and values within a colour (16, df 15).
  EXPECT_LT(chi_square_uniform(fill), kChi2_1e4_df125);
  EXPECT_LT(chi_square_uniform(value), kChi2_1e4_df15);
  // Sanity of the statistic itself: a skewed histogram fails.
  auto skewed = pos;
  skewed[0] += 2000;
  EXPECT_GT(chi_square_uniform(skewed), kChi2_1e4_df50);
}

TEST(OffsetKeyMask, OnlyAnswersCountAndTheBatchMatchesSingleSequences) {
  const int64_t L = 40, B = 3;
  const auto s = make_offset_key_sequence(9, 10, L);
  const auto m = offset_key_loss_mask(s);
  ASSERT_EQ(int64_t(m.size()), L);
  int64_t on = 0;
  for (int64_t t = 0; t < L; ++t) {
    if (m[size_t(t)]) {
      ++on;
      EXPECT_EQ(s.tokens[size_t(t - 1)], V::sep);
      EXPECT_TRUE(V::is_value(s.tokens[size_t(t)]));
    }
  }
  EXPECT_EQ(on, V::kColours);
  EXPECT_EQ(m[size_t(L - 1)], 1);  // the last token is the last answer

  std::vector<int64_t> tokens(size_t(B * L), -1);
  std::vector<uint8_t> mask(size_t(B * L), 7);
  fill_offset_key_batch(9, 9, B, L, tokens.data(), mask.data());
  for (int64_t b = 0; b < B; ++b) {
    const auto sb = make_offset_key_sequence(9, uint64_t(9 + b), L);
    const auto mb = offset_key_loss_mask(sb);
    EXPECT_TRUE(std::equal(sb.tokens.begin(), sb.tokens.end(), tokens.begin() + b * L));
    EXPECT_TRUE(std::equal(mb.begin(), mb.end(), mask.begin() + b * L));
  }
  std::vector<int64_t> only(static_cast<size_t>(L));
  fill_offset_key_batch(9, 10, 1, L, only.data(), nullptr);  // mask optional
  EXPECT_EQ(only, s.tokens);
  expect_error([&] { fill_offset_key_batch(9, 0, 1, 10, only.data(), nullptr); }, {"at least 17", "got 10"});
}

// A hand-made sequence: answers of the four colours at known distances.
OffsetKeySequence hand_made() {
  OffsetKeySequence s;
  s.colours = {0, 1, 2, 3};
  s.answers = {V::value(0, 0), V::value(1, 5), V::value(2, 15), V::value(3, 7)};
  s.distances = {10, 100, 200, 64};
  s.answer_positions = {300, 303, 306, 309};
  for (size_t i = 0; i < 4; ++i) s.needle_positions.push_back(s.answer_positions[i] - s.distances[i]);
  return s;
}

TEST(OffsetKeyScore, AllRightAllWrongAndTheFarSplit) {
  const auto s = hand_made();
  const auto right = score_offset_key(s, s.answers, 64);
  EXPECT_EQ(right.queries, 4);
  EXPECT_EQ(right.correct, 4);
  EXPECT_EQ(right.far_queries, 2);  // 100 and 200 (64 is not > 64)
  EXPECT_EQ(right.far_correct, 2);
  EXPECT_DOUBLE_EQ(right.accuracy(), 1.0);
  EXPECT_DOUBLE_EQ(right.far_accuracy(), 1.0);

  const auto wrong = score_offset_key(s, {V::sep, V::value(1, 6), V::value(0, 15), V::bos}, 64);
  EXPECT_EQ(wrong.correct, 0);
  EXPECT_EQ(wrong.far_correct, 0);
  EXPECT_EQ(wrong.far_queries, 2);
  EXPECT_DOUBLE_EQ(wrong.accuracy(), 0.0);

  // Right on the near needles and on the 200-token one only.
  const auto mixed = score_offset_key(s, {V::value(0, 0), V::value(1, 4), V::value(2, 15), V::value(3, 7)}, 64);
  EXPECT_EQ(mixed.correct, 3);
  EXPECT_EQ(mixed.far_queries, 2);
  EXPECT_EQ(mixed.far_correct, 1);
  EXPECT_DOUBLE_EQ(mixed.accuracy(), 0.75);
  EXPECT_DOUBLE_EQ(mixed.far_accuracy(), 0.5);

  // The threshold moves the split: everything is far beyond 5, nothing beyond 200.
  EXPECT_EQ(score_offset_key(s, s.answers, 5).far_queries, 4);
  const auto none = score_offset_key(s, s.answers, 200);
  EXPECT_EQ(none.far_queries, 0);
  EXPECT_TRUE(std::isnan(none.far_accuracy()));
  EXPECT_TRUE(std::isnan(OffsetKeyScore{}.accuracy()));

  // Aggregation sums counts.
  const auto sum = aggregate_offset_key({right, wrong, mixed});
  EXPECT_EQ(sum.queries, 12);
  EXPECT_EQ(sum.correct, 7);
  EXPECT_EQ(sum.far_queries, 6);
  EXPECT_EQ(sum.far_correct, 3);
  EXPECT_DOUBLE_EQ(sum.far_accuracy(), 0.5);
  EXPECT_EQ(aggregate_offset_key({}).queries, 0);
}

TEST(OffsetKeyScore, GeneratedSequencesAndBadInput) {
  const auto s = make_offset_key_sequence(1, 2, 100);
  const auto r = score_offset_key(s, s.answers, 30);
  int64_t far = 0;
  for (auto d : s.distances) far += d > 30;
  EXPECT_EQ(r.correct, 4);
  EXPECT_EQ(r.far_queries, far);
  expect_error([&] { (void)score_offset_key(s, {1, 2, 3}, 30); }, {"expected 4 predictions", "got 3"});
  expect_error([&] { (void)score_offset_key(s, s.answers, -1); }, {"far threshold", ">= 0"});
}

// The cropped baseline's window: BOS then the last C − 1 tokens, positions renumbered; every far needle is outside
// it, every near needle inside at its renumbered position; at L ≤ C the sequence is unchanged.
TEST(OffsetKeyCrop, WindowRenumberingAndFarNeedlesOutside) {
  const int64_t C = 64;
  int64_t far_seen = 0, near_seen = 0;
  for (int64_t L : {C + 1, 2 * C, 8 * C + 5}) {
    for (uint64_t i = 0; i < 20; ++i) {
      const auto s = make_offset_key_sequence(7, i, L);
      const auto c = crop_offset_key_sequence(s, C);
      ASSERT_EQ(int64_t(c.tokens.size()), C);
      EXPECT_EQ(c.tokens[0], V::bos);
      for (int64_t p = 1; p < C; ++p) ASSERT_EQ(c.tokens[size_t(p)], s.tokens[size_t(L - C + p)]) << L << " " << p;
      EXPECT_EQ(c.answers, s.answers);
      EXPECT_EQ(c.distances, s.distances);
      EXPECT_EQ(c.colours, s.colours);
      for (size_t q = 0; q < s.answers.size(); ++q) {
        EXPECT_EQ(c.answer_positions[q], s.answer_positions[q] - (L - C));
        EXPECT_EQ(c.tokens[size_t(c.answer_positions[q])], V::sep);
        EXPECT_EQ(c.tokens[size_t(c.answer_positions[q] + 1)], s.answers[q]);
        if (s.distances[q] > C) {
          ++far_seen;
          EXPECT_EQ(c.needle_positions[q], -1);
        } else if (c.needle_positions[q] >= 0) {
          ++near_seen;
          EXPECT_EQ(c.tokens[size_t(c.needle_positions[q])], s.answers[q]);
          EXPECT_EQ(c.needle_positions[q], s.needle_positions[q] - (L - C));
        }
      }
    }
  }
  EXPECT_GT(far_seen, 0);
  EXPECT_GT(near_seen, 0);
  for (int64_t L : {kOffsetKeyMinLength, int64_t(40), C}) {
    const auto s = make_offset_key_sequence(7, 3, L);
    const auto c = crop_offset_key_sequence(s, C);
    EXPECT_EQ(c.tokens, s.tokens);
    EXPECT_EQ(c.answer_positions, s.answer_positions);
    EXPECT_EQ(c.needle_positions, s.needle_positions);
  }
  expect_error([] { (void)crop_offset_key_sequence(make_offset_key_sequence(1, 0, 100), 10); },
               {"crop context", "at least 17 tokens", "got 10"});
}

}  // namespace
}  // namespace drope::tasks
