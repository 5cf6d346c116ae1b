// drope-eval offset-key: accuracy of a model on the offset-key retrieval task (tasks/offset_key.h)
// per sequence length, overall and on far needles (distance to the query > the far threshold, normally the
// training length C), as a library run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drope/eval/method.h"
#include "drope/tasks/offset_key.h"

namespace drope::eval {

// Most queries per length that --queries takes (offset-key and fit-temperature --task): 262144 sequences.
constexpr int64_t kMaxQueries = int64_t(1) << 20;

struct OffsetKeyRun {
  MethodSpec method;                 // the model and its variant (yarn:2, temperature:0.2, drope, ...)
  std::vector<int64_t> lengths;      // sequence lengths (tokens, query block included), or
  std::vector<double> multipliers;   // multiples of the training length
  int64_t queries = 1000;  // queries per length: ceil(queries / 4) sequences of 4 queries each, at most kMaxQueries
  uint64_t seed = 42;  // generator seed
  int64_t batch = 16;  // sequences per forward
  std::string out = "results/offset-key";  // prefix of .json/.csv/.md and .png/.svg
  int64_t far_threshold = 0;  // a needle is far when its distance > this; 0 = the training length
  std::string split = "test";  // index split of the scored sequences: test, or heldout (model selection)
  bool crop = false;  // the cropped-context baseline: at L > C the model reads BOS + the last C − 1 tokens
};

// Sequences come from the `split` part of the index space (tasks::OffsetKeySplit::test by default, or
// ::heldout), so they never coincide with training sequences of the same seed, and test sequences never
// coincide with held-out ones (on which a study selects its recipe). Each length's sequences are scored by
// the argmax of the logits at the SEP positions (over the whole vocabulary), in no-grad forwards of
// `batch` sequences. Writes a results document of kind "offset-key": method, seed, far_threshold,
// train_length, index_split (the split's name), results [{length, accuracy, far_accuracy, queries, far_queries,
// correct, far_correct}] (accuracies in %, far_accuracy null when no needle is far) and summary {"acc@L", "far@L"}; a
// table and a plot of accuracy vs length.
// With `crop` (the cropped-context baseline, docs/design.md#statistics-protocol) the method must be the model as
// it is (no RoPE scaling, temperature or DroPE): at L > C each sequence is read as
// tasks::crop_offset_key_sequence(s, C) and scored at the same answers and distances; at L ≤ C it is the plain
// evaluation. The file then says "crop": true.
void run_offset_key(const OffsetKeyRun& r);

// Logits (B, Q, V) at the answer positions of `seqs` (all of one length, Q queries each), in one no-grad forward
// of the batch; only the answer positions go through the LM head. With crop_context > 0 each sequence is first
// cropped to it (tasks::crop_offset_key_sequence): what `run_offset_key` scores with `crop`.
torch::Tensor offset_key_answer_logits(DecoderLM& model, const std::vector<tasks::OffsetKeySequence>& seqs,
                                       int64_t crop_context = 0);

// Mean NLL (nats) of the answers of `sequences` held-out sequences (tasks::OffsetKeySplit::heldout) of
// `length` tokens for `seed`, in no-grad forwards of `batch` sequences: the held-out loss that
// `drope-eval fit-temperature --task offset-key` minimises over β.
double offset_key_answer_nll(DecoderLM& model, uint64_t seed, int64_t length, int64_t sequences, int64_t batch);

}  // namespace drope::eval
