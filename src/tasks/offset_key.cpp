// Offset-key retrieval (docs/design.md#offset-key-retrieval): sequences, loss masks and scoring. See offset_key.h for
// the layout.
#include "drope/tasks/offset_key.h"

#include <array>
#include <limits>
#include <random>

#include "drope/core/error.h"
#include "drope/tasks/niah.h"

namespace drope::tasks {

using V = OffsetKeyVocab;

void check_offset_key_vocab(int64_t vocab_size, const std::string& what) {
  if (vocab_size < V::size)
    fail("{}: the offset-key task needs a vocabulary of at least {} token ids (BOS, {} query markers, {} values, "
         "SEP, {} fillers), the model has {}",
         what, V::size, V::kColours, V::kColours * V::kValuesPerColour, V::kFillers, vocab_size);
}

void check_offset_key_length(int64_t length, const std::string& what) {
  if (length < kOffsetKeyMinLength)
    fail("{}: an offset-key sequence needs at least {} tokens (BOS, {} needles, a {}-token query block), got {}", what,
         kOffsetKeyMinLength, V::kColours, kOffsetKeyQueryTokens, length);
}

uint64_t offset_key_index(OffsetKeySplit split, uint64_t i) {
  if (i >> 62) fail("offset-key: index {} is outside the 2^62 indices of a split", i);
  return (uint64_t(split) << 62) | i;
}

OffsetKeySequence make_offset_key_sequence(uint64_t seed, uint64_t index, int64_t length) {
  check_offset_key_length(length, "offset-key sequence length");
  static const uint64_t kStream = stable_hash("offset-key");
  OffsetKeySequence s;
  s.seed = derive_seed(seed, {kStream, uint64_t(length), index});
  std::mt19937_64 rng(s.seed);
  const int64_t body = length - 1 - kOffsetKeyQueryTokens;  // positions [1, 1 + body)
  s.tokens.resize(size_t(length));
  s.tokens[0] = V::bos;
  for (int64_t t = 1; t <= body; ++t) s.tokens[size_t(t)] = V::filler(int64_t(draw_below(rng, V::kFillers)));
  // Needles: colour c at a uniform body position distinct from the earlier colours' (rejection).
  std::array<int64_t, V::kColours> needle_pos{}, needle_val{};
  for (int64_t c = 0; c < V::kColours; ++c) {
    int64_t p = 0;
    bool taken = true;
    while (taken) {
      p = 1 + int64_t(draw_below(rng, uint64_t(body)));
      taken = false;
      for (int64_t e = 0; e < c; ++e) taken = taken || needle_pos[size_t(e)] == p;
    }
    needle_pos[size_t(c)] = p;
    needle_val[size_t(c)] = V::value(c, int64_t(draw_below(rng, V::kValuesPerColour)));
    s.tokens[size_t(p)] = needle_val[size_t(c)];
  }
  // Query order: a uniform permutation (Fisher–Yates).
  std::array<int64_t, V::kColours> order{};
  for (int64_t c = 0; c < V::kColours; ++c) order[size_t(c)] = c;
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[size_t(draw_below(rng, i))]);
  int64_t t = 1 + body;
  for (int64_t c : order) {
    s.tokens[size_t(t)] = V::query(c);
    s.tokens[size_t(t + 1)] = V::sep;
    s.tokens[size_t(t + 2)] = needle_val[size_t(c)];
    s.colours.push_back(c);
    s.answer_positions.push_back(t + 1);
    s.answers.push_back(needle_val[size_t(c)]);
    s.needle_positions.push_back(needle_pos[size_t(c)]);
    s.distances.push_back(t + 1 - needle_pos[size_t(c)]);
    t += 3;
  }
  return s;
}

OffsetKeySequence crop_offset_key_sequence(const OffsetKeySequence& s, int64_t context) {
  check_offset_key_length(context, "offset-key crop context");
  const int64_t length = int64_t(s.tokens.size());
  if (length <= context) return s;
  const int64_t shift = length - context;  // position p > shift becomes p − shift
  OffsetKeySequence c = s;
  c.tokens.assign(1, V::bos);
  c.tokens.insert(c.tokens.end(), s.tokens.begin() + shift + 1, s.tokens.end());
  for (auto& p : c.answer_positions) p -= shift;
  for (auto& p : c.needle_positions) p = p > shift ? p - shift : -1;
  return c;
}

std::vector<uint8_t> offset_key_loss_mask(const OffsetKeySequence& s) {
  std::vector<uint8_t> mask(s.tokens.size(), 0);
  for (int64_t p : s.answer_positions) mask[size_t(p + 1)] = 1;
  return mask;
}

void fill_offset_key_batch(uint64_t seed, uint64_t first_index, int64_t batch, int64_t length, int64_t* tokens,
                           uint8_t* mask) {
  if (batch < 0) fail("offset-key: batch must be >= 0, got {}", batch);
  check_offset_key_length(length, "offset-key batch");
  for (int64_t b = 0; b < batch; ++b) {
    const auto s = make_offset_key_sequence(seed, first_index + uint64_t(b), length);
    std::copy(s.tokens.begin(), s.tokens.end(), tokens + b * length);
    if (mask) {
      const auto m = offset_key_loss_mask(s);
      std::copy(m.begin(), m.end(), mask + b * length);
    }
  }
}

double OffsetKeyScore::accuracy() const {
  return queries > 0 ? double(correct) / double(queries) : std::numeric_limits<double>::quiet_NaN();
}

double OffsetKeyScore::far_accuracy() const {
  return far_queries > 0 ? double(far_correct) / double(far_queries) : std::numeric_limits<double>::quiet_NaN();
}

OffsetKeyScore& OffsetKeyScore::operator+=(const OffsetKeyScore& o) {
  queries += o.queries;
  correct += o.correct;
  far_queries += o.far_queries;
  far_correct += o.far_correct;
  return *this;
}

OffsetKeyScore score_offset_key(const OffsetKeySequence& s, const std::vector<int64_t>& predictions,
                                int64_t far_threshold) {
  if (predictions.size() != s.answers.size())
    fail("offset-key scoring: expected {} predictions (one per query), got {}", s.answers.size(), predictions.size());
  if (far_threshold < 0) fail("offset-key scoring: the far threshold must be >= 0, got {}", far_threshold);
  OffsetKeyScore r;
  for (size_t i = 0; i < predictions.size(); ++i) {
    const bool right = predictions[i] == s.answers[i];
    ++r.queries;
    r.correct += right;
    if (s.distances[i] > far_threshold) {
      ++r.far_queries;
      r.far_correct += right;
    }
  }
  return r;
}

OffsetKeyScore aggregate_offset_key(const std::vector<OffsetKeyScore>& scores) {
  OffsetKeyScore r;
  for (const auto& s : scores) r += s;
  return r;
}

}  // namespace drope::tasks
