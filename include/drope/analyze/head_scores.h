// Per-head attention scores (drope-analyze head-scores): for every layer × head, how much a query attends to the
// token just before it (a previous-token head) and to the first token, averaged over a batch of sequences; on
// offset-key sequences (tasks/offset_key.h) also what the answer position (SEP) and the query marker Q_c before
// it attend to: Q_c, the needle of the query's colour, and the other colours' needles.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "drope/model/transformer.h"
#include "drope/tasks/offset_key.h"

namespace drope::analyze {

// One head's scores; the offset-key ones are NaN for other sequences. α_ij is the attention of query i on key j.
struct HeadScore {
  double previous_token = 0;           // mean over rows and queries i >= 1 of α_{i,i-1}
  double first_token = 0;              // mean over rows and queries i >= 1 of α_{i,0}
  double answer_to_query = NAN;        // mean over answers of α_{s,s-1}: SEP (s) on the query marker Q_c
  double answer_to_earlier_queries = NAN;  // α_{s,q} averaged over the block's earlier query markers q (per
                                           // marker), over the answers that have any (all but the first)
  double answer_to_needle = NAN;  // α_{s,n_c}: SEP on the needle of its query's colour
  double answer_to_other_needles = NAN;  // α_{s,n_c'} averaged over the other colours c' (per needle)
  double query_to_needle = NAN;  // α_{s-1,n_c}: Q_c on the needle of its colour
  double query_to_other_needles = NAN;  // α_{s-1,n_c'}, per needle
};

struct HeadScores {
  int64_t sequences = 0, length = 0;
  bool offset_key = false;  // the offset-key scores are set
  std::vector<std::vector<HeadScore>> heads;  // [layer][head]
};

// Mean of the subdiagonal α_{i,i-1}, i >= 1, of a (T, T) attention map (T >= 2).
double previous_token_score(const torch::Tensor& map);

// Scores of every head over token ids (B, T), T >= 2, run `batch` rows at a time (no grad). `seqs` is empty or
// holds the offset-key sequence of each row (its tokens equal to the row's); then the offset-key scores are set.
HeadScores head_scores(DecoderLM& model, const torch::Tensor& ids, const std::vector<tasks::OffsetKeySequence>& seqs,
                       int64_t batch);

// The scores as a table: one row per layer × head (layer, head, then the scores in HeadScore's order; the
// offset-key columns only when they are set), numbers with 6 significant digits.
std::vector<std::string> head_score_columns(const HeadScores& s);
std::vector<std::vector<std::string>> head_score_rows(const HeadScores& s);

}  // namespace drope::analyze
