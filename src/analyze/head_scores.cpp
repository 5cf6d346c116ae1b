// Per-head attention scores (analyze/head_scores.h): previous-token and first-token attention of every head,
// and on offset-key sequences the attention of the answer position and the query marker.
#include "drope/analyze/head_scores.h"

#include <algorithm>

#include <fmt/format.h>

#include "drope/core/error.h"

namespace drope::analyze {

double previous_token_score(const torch::Tensor& map) {
  TORCH_CHECK(map.dim() == 2 && map.size(0) == map.size(1) && map.size(0) >= 2,
              "previous_token_score: map must be (T, T) with T >= 2");
  return map.to(torch::kDouble).diagonal(-1).mean().item<double>();
}

HeadScores head_scores(DecoderLM& model, const torch::Tensor& ids, const std::vector<tasks::OffsetKeySequence>& seqs,
                       int64_t batch) {
  TORCH_CHECK(ids.dim() == 2, "head_scores: ids must be (B, T)");
  const int64_t B = ids.size(0), T = ids.size(1);
  if (T < 2) fail("head scores need sequences of at least 2 tokens, got {}", T);
  if (batch < 1) fail("head scores: batch must be >= 1, got {}", batch);
  if (!seqs.empty() && int64_t(seqs.size()) != B)
    fail("head scores: {} offset-key sequences for {} rows", seqs.size(), B);
  const auto& cfg = model->config();
  HeadScores r;
  r.sequences = B;
  r.length = T;
  r.offset_key = !seqs.empty();
  // Sums over rows (and queries) first, divided at the end.
  HeadScore zero;
  if (r.offset_key)
    zero.answer_to_query = zero.answer_to_earlier_queries = zero.answer_to_needle = zero.answer_to_other_needles =
        zero.query_to_needle = zero.query_to_other_needles = 0;
  r.heads.assign(static_cast<size_t>(cfg.num_layers), std::vector<HeadScore>(static_cast<size_t>(cfg.num_heads), zero));
  int64_t answers = 0, later_answers = 0;  // all answers; those with an earlier query in the block
  const std::vector<int64_t> rows_and_queries = {0, 2};
  torch::NoGradGuard no_grad;
  for (int64_t first = 0; first < B; first += batch) {
    const int64_t n = std::min(batch, B - first);
    std::vector<torch::Tensor> probs;
    ForwardOptions opt;
    opt.attention_probs = &probs;
    model->hidden(ids.slice(0, first, first + n), opt);
    for (size_t l = 0; l < r.heads.size(); ++l) {
      auto p = probs[l].to(torch::kDouble).contiguous();                               // (n, H, T, T)
      auto prev = p.diagonal(-1, 2, 3).sum(rows_and_queries).contiguous();            // (H)
      auto bos = p.select(3, 0).slice(2, 1).sum(rows_and_queries).contiguous();       // (H)
      auto a = p.accessor<double, 4>();
      for (size_t h = 0; h < r.heads[l].size(); ++h) {
        auto& s = r.heads[l][h];
        s.previous_token += prev.data_ptr<double>()[h];
        s.first_token += bos.data_ptr<double>()[h];
        for (int64_t b = 0; b < n && r.offset_key; ++b) {
          const auto& sq = seqs[size_t(first + b)];
          const size_t Q = sq.answer_positions.size();
          const auto att = a[b][int64_t(h)];
          for (size_t q = 0; q < Q; ++q) {
            const int64_t at = sq.answer_positions[q], needle = sq.needle_positions[q];
            double answer_other = 0, query_other = 0;
            for (size_t o = 0; o < Q; ++o)
              if (o != q) {
                answer_other += att[at][sq.needle_positions[o]];
                query_other += att[at - 1][sq.needle_positions[o]];
              }
            s.answer_to_query += att[at][at - 1];
            double earlier = 0;
            for (size_t o = 0; o < q; ++o) earlier += att[at][sq.answer_positions[o] - 1];
            if (q > 0) s.answer_to_earlier_queries += earlier / double(q);
            s.answer_to_needle += att[at][needle];
            s.answer_to_other_needles += answer_other / double(Q - 1);
            s.query_to_needle += att[at - 1][needle];
            s.query_to_other_needles += query_other / double(Q - 1);
          }
        }
      }
    }
    for (int64_t b = 0; b < n && r.offset_key; ++b) {
      answers += int64_t(seqs[size_t(first + b)].answer_positions.size());
      later_answers += int64_t(seqs[size_t(first + b)].answer_positions.size()) - 1;
    }
  }
  const double queries = double(B) * double(T - 1);
  for (auto& layer : r.heads)
    for (auto& s : layer) {
      s.previous_token /= queries;
      s.first_token /= queries;
      if (!r.offset_key) continue;
      for (double* v : {&s.answer_to_query, &s.answer_to_needle, &s.answer_to_other_needles, &s.query_to_needle,
                        &s.query_to_other_needles})
        *v /= double(answers);
      s.answer_to_earlier_queries /= double(later_answers);
    }
  return r;
}

std::vector<std::string> head_score_columns(const HeadScores& s) {
  std::vector<std::string> c = {"layer", "head", "previous_token", "first_token"};
  if (s.offset_key)
    for (const char* k : {"answer_to_query", "answer_to_earlier_queries", "answer_to_needle", "answer_to_other_needles",
                          "query_to_needle", "query_to_other_needles"})
      c.emplace_back(k);
  return c;
}

std::vector<std::vector<std::string>> head_score_rows(const HeadScores& s) {
  std::vector<std::vector<std::string>> rows;
  for (size_t l = 0; l < s.heads.size(); ++l)
    for (size_t h = 0; h < s.heads[l].size(); ++h) {
      const auto& o = s.heads[l][h];
      std::vector<double> v = {o.previous_token, o.first_token};
      if (s.offset_key)
        v.insert(v.end(), {o.answer_to_query, o.answer_to_earlier_queries, o.answer_to_needle,
                           o.answer_to_other_needles, o.query_to_needle, o.query_to_other_needles});
      std::vector<std::string> row = {std::to_string(l), std::to_string(h)};
      for (double x : v) row.push_back(fmt::format("{:.6g}", x));
      rows.push_back(std::move(row));
    }
  return rows;
}

}  // namespace drope::analyze
