// Offset-key retrieval: a synthetic long-range retrieval task that a small decoder learns in a
// few million tokens, on which RoPE collapses beyond its training length C and DroPE holds
// (docs/design.md#offset-key-retrieval).
//
// A sequence of length L over reserved token ids (OffsetKeyVocab):
//   BOS, a body of uniform random filler tokens, in which one needle per colour c (a value token of colour
//   c, uniform over the colour's 16 values) sits at a uniformly random body position (the 4 positions are
//   distinct), then the query block `Q_c SEP v_c` for all 4 colours in random order.
// The answer v_c is predicted at SEP (the model's output at the SEP position); only the answers are
// scored, and only they carry training loss. SEP makes the task positional: the model must read Q_c
// through a previous-token head before the content lookup of the colour's needle.
//
// Determinism (as in niah.h): every draw comes from std::mt19937_64 seeded by a splitmix64 derivation of
// (seed, "offset-key", L, index), with our own bounded draws; the same (seed, L, index) gives the same
// sequence on every platform. Callers keep training, held-out and test sequences apart by the index
// stream (offset_key_index): the top two bits of the index name the split.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace drope::tasks {

// ---- vocabulary ------------------------------------------------------------------------------------------

// The reserved ids. Colour c's values are value_first + 16·c + k, k in [0, 16).
struct OffsetKeyVocab {
  static constexpr int64_t kColours = 4;
  static constexpr int64_t kValuesPerColour = 16;
  static constexpr int64_t kFillers = 126;

  static constexpr int64_t bos = 0;
  static constexpr int64_t query_first = 1;                                    // Q0..Q3: 1..4
  static constexpr int64_t value_first = query_first + kColours;               // 64 values: 5..68
  static constexpr int64_t sep = value_first + kColours * kValuesPerColour;    // 69
  static constexpr int64_t filler_first = sep + 1;                             // 126 fillers: 70..195
  static constexpr int64_t size = filler_first + kFillers;                     // 196 ids in all

  static constexpr int64_t query(int64_t colour) { return query_first + colour; }
  static constexpr int64_t value(int64_t colour, int64_t k) { return value_first + colour * kValuesPerColour + k; }
  static constexpr int64_t filler(int64_t k) { return filler_first + k; }
  static constexpr bool is_value(int64_t id) { return id >= value_first && id < sep; }
  static constexpr bool is_filler(int64_t id) { return id >= filler_first && id < size; }
  // Colour of a value token (-1 for any other id).
  static constexpr int64_t colour_of(int64_t id) { return is_value(id) ? (id - value_first) / kValuesPerColour : -1; }
};

// Tokens of the query block (`Q_c SEP v_c` per colour) and the shortest valid sequence: BOS, one body
// position per needle, the query block.
inline constexpr int64_t kOffsetKeyQueryTokens = 3 * OffsetKeyVocab::kColours;
inline constexpr int64_t kOffsetKeyMinLength = 1 + OffsetKeyVocab::kColours + kOffsetKeyQueryTokens;

// Fails unless a model with `vocab_size` token ids can represent the task (≥ OffsetKeyVocab::size);
// `what` (a flag, a model directory) prefixes the message.
void check_offset_key_vocab(int64_t vocab_size, const std::string& what);

// Fails unless `length` ≥ kOffsetKeyMinLength; `what` prefixes the message.
void check_offset_key_length(int64_t length, const std::string& what);

// ---- index streams -------------------------------------------------------------------------------------

// Splits of the index space, so training, held-out (temperature fit, validation) and test (drope-eval
// offset-key) sequences never coincide: the split is the index's top two bits.
enum class OffsetKeySplit : uint64_t { train = 0, heldout = 1, test = 2 };
// Index `i` (< 2^62) of `split`.
uint64_t offset_key_index(OffsetKeySplit split, uint64_t i);

// ---- sequences ---------------------------------------------------------------------------------------------

struct OffsetKeySequence {
  uint64_t seed = 0;                    // the derived per-sequence seed
  std::vector<int64_t> tokens;          // length L
  // Per query, in query-block order:
  std::vector<int64_t> colours;         // c
  std::vector<int64_t> answer_positions;  // position of the query's SEP: the model's output there predicts v_c
  std::vector<int64_t> answers;         // v_c (= tokens[answer_position + 1])
  std::vector<int64_t> needle_positions;  // position of v_c in the body
  std::vector<int64_t> distances;       // answer_position − needle_position: the offset the attention at SEP
                                        // must bridge, in [2, L − 3]
};

// Sequence `index` of length `length` for `seed`. Fails (naming --lengths) when length < kOffsetKeyMinLength.
OffsetKeySequence make_offset_key_sequence(uint64_t seed, uint64_t index, int64_t length);

// The sequence the cropped-context baseline reads (docs/design.md#statistics-protocol): for L > context, BOS
// followed by the last context − 1 tokens of s (positions L − context + 1 … L − 1, renumbered 1 … context − 1),
// its answer and needle positions renumbered alike (a needle outside the window gets −1); answers, colours and
// distances stay those of s, so a query is far by its distance in s. For L ≤ context, s itself. Fails unless the
// window holds BOS, the query block and one needle position per colour (context ≥ kOffsetKeyMinLength).
OffsetKeySequence crop_offset_key_sequence(const OffsetKeySequence& s, int64_t context);

// Which target tokens carry loss: mask[t] = 1 iff tokens[t] is an answer (t = answer_position + 1), i.e.
// the prediction made at position t − 1 counts. Length L, parallel to tokens (a trainer that feeds
// tokens[0, L−1) and predicts tokens[1, L) uses mask[1, L)).
std::vector<uint8_t> offset_key_loss_mask(const OffsetKeySequence& s);

// Fills `batch` sequences of length `length` (indices first_index, first_index + 1, ...) row-major into
// tokens[batch·length] and their loss masks into mask[batch·length] (mask may be null).
void fill_offset_key_batch(uint64_t seed, uint64_t first_index, int64_t batch, int64_t length, int64_t* tokens,
                           uint8_t* mask);

// ---- scoring -------------------------------------------------------------------------------------------------

// Counts of right answers, overall and on far needles (distance > the far threshold, normally C).
struct OffsetKeyScore {
  int64_t queries = 0, correct = 0;
  int64_t far_queries = 0, far_correct = 0;
  double accuracy() const;      // correct / queries; NaN when there are none
  double far_accuracy() const;  // far_correct / far_queries; NaN when there are none
  OffsetKeyScore& operator+=(const OffsetKeyScore& o);
};

// Scores one sequence: `predictions` are the model's argmax tokens at the answer positions, one per query
// in query-block order (size must equal the number of queries); a query is far when its distance >
// far_threshold.
OffsetKeyScore score_offset_key(const OffsetKeySequence& s, const std::vector<int64_t>& predictions,
                                int64_t far_threshold);

// Sum of the scores of many sequences.
OffsetKeyScore aggregate_offset_key(const std::vector<OffsetKeyScore>& scores);

}  // namespace drope::tasks
