// drope-eval offset-key: accuracy of a model on the offset-key retrieval task (tasks/offset_key.h)
// per sequence length, overall and on far needles (distance to the query > the far threshold, normally the
// training length C), as a library run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "drope/eval/method.h"

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
};

// Sequences come from the `split` part of the index space (tasks::OffsetKeySplit::test by default, or
// ::heldout), so they never coincide with training sequences of the same seed, and test sequences never
// coincide with held-out ones (on which a study selects its recipe). Each length's sequences are scored by
// the argmax of the logits at the SEP positions (over the whole vocabulary), in no-grad forwards of
// `batch` sequences. Writes a results document of kind "offset-key": method, seed, far_threshold,
// train_length, index_split (the split's name), results [{length, accuracy, far_accuracy, queries, far_queries,
// correct, far_correct}] (accuracies in %, far_accuracy null when no needle is far) and summary {"acc@L", "far@L"}; a
// table and a plot of accuracy vs length.
void run_offset_key(const OffsetKeyRun& r);

// Mean NLL (nats) of the answers of `sequences` held-out sequences (tasks::OffsetKeySplit::heldout) of
// `length` tokens for `seed`, in no-grad forwards of `batch` sequences: the held-out loss that
// `drope-eval fit-temperature --task offset-key` minimises over β.
double offset_key_answer_nll(DecoderLM& model, uint64_t seed, int64_t length, int64_t sequences, int64_t batch);

}  // namespace drope::eval
