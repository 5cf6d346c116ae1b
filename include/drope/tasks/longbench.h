// LongBench v1 (THUDM/LongBench, LongBench/ folder) without the model: the 21 datasets with their
// prompt templates (config/dataset2prompt.json), generation lengths (config/dataset2maxlen.json),
// metrics (eval.py's dataset2metric) and chat-template exceptions (pred.py); the jsonl data and
// prediction files with validation; prompt building and middle truncation as pred.py does them;
// scoring and the LongBench-E length buckets exactly as eval.py. Torch-free.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "drope/tasks/report.h"

namespace drope::tasks::longbench {

enum class Metric { qa_f1, qa_f1_zh, rouge, rouge_zh, classification, retrieval, retrieval_zh, count, code_sim };
std::string metric_name(Metric m);  // the metrics.py function name, e.g. "qa_f1_score"

struct Dataset {
  std::string name;
  std::string prompt;          // str.format template over the record ({context}, {input})
  int64_t max_new_tokens = 0;  // dataset2maxlen.json
  Metric metric = Metric::qa_f1;
  bool chat_template = true;     // pred.py applies the model's chat prompt (not for trec, triviaqa, ...)
  bool first_line_only = false;  // eval.py scores only the first line: trec, triviaqa, samsum, lsht
  bool in_longbench_e = false;   // one of the 13 LongBench-E datasets
};

// All 21 datasets in pred.py's order.
const std::vector<Dataset>& datasets();
// The dataset of that name; an unknown name fails listing the valid ones.
const Dataset& dataset(std::string_view name);
// "all" or a comma-separated list → datasets (all: the 21, or the 13 of LongBench-E when `e`). Unknown
// names, duplicates and (with `e`) datasets without a LongBench-E version fail.
std::vector<const Dataset*> parse_tasks(const std::string& spec, bool e);

// One record of a LongBench data file (<task>.jsonl / <task>_e.jsonl).
struct Sample {
  int64_t line = 0;            // 1-based line in the file
  nlohmann::json record;       // the whole object: prompts may use any of its keys
  std::vector<std::string> answers;
  std::optional<std::vector<std::string>> all_classes;  // null in the file → nullopt
  int64_t length = 0;
};
// Reads and validates a data file: every non-blank line a JSON object with string `input` and
// `context`, `answers` a list of strings (integers are taken as their decimal text), integer
// `length`, `all_classes` null or a list of strings (a list for classification datasets). Errors
// name file:line and the key. `limit` > 0 keeps the first `limit` records.
std::vector<Sample> read_samples(const std::string& path, const Dataset& ds, int64_t limit = 0);

// Python's template.format(**record) for templates with plain {name} fields and {{ }} escapes.
std::string format_prompt(std::string_view tmpl, const nlohmann::json& record);
std::string build_prompt(const Dataset& ds, const Sample& s);

// pred.py's middle truncation: a prompt longer than max_length tokens keeps its first and last
// int(max_length/2) tokens (decoded separately and concatenated by the caller, as pred.py).
struct MiddleCut {
  bool truncated = false;
  std::vector<int32_t> head, tail;  // untruncated: head = all tokens, tail empty
};
MiddleCut truncate_middle(const std::vector<int32_t>& tokens, int64_t max_length);

// One line of a prediction file as pred.py writes it: pred, answers, all_classes, length (+ _id).
std::string prediction_line(const Sample& s, const std::string& pred);

// A record of a prediction file (pred.py's output format).
struct Prediction {
  int64_t line = 0;
  std::string pred;
  std::vector<std::string> answers;
  std::optional<std::vector<std::string>> all_classes;
  std::optional<int64_t> length;
};
// Reads a prediction file; `need_length` (LongBench-E) makes `length` required. Errors name file:line.
std::vector<Prediction> read_predictions(const std::string& path, bool need_length);

// eval.py's post-processing: the first line after leading newlines for trec/triviaqa/samsum/lsht.
std::string post_process(const Dataset& ds, std::string_view prediction);
// One metric on one (prediction, ground truth) pair.
double metric_score(Metric m, std::string_view prediction, std::string_view ground_truth,
                    const std::optional<std::vector<std::string>>& all_classes);
// Post-processed prediction scored against each answer; the maximum (0 with no answers).
double sample_score(const Dataset& ds, std::string_view prediction, const std::vector<std::string>& answers,
                    const std::optional<std::vector<std::string>>& all_classes);

// eval.py scorer(): round(100 * sum / n, 2). Like eval.py, all_classes comes from the last record.
double score(const Dataset& ds, const std::vector<Prediction>& preds);
// eval.py scorer_e(): per length bucket (0-4k, 4-8k, 8k+) round(100 * np.mean(scores), 2); an empty
// bucket is NaN (as np.mean of an empty list).
inline const std::array<std::string, 3> kBuckets = {"0-4k", "4-8k", "8k+"};
size_t bucket_of(int64_t length);
std::array<double, 3> score_e(const Dataset& ds, const std::vector<Prediction>& preds);

// Python's round(x, ndigits) on a float (correctly rounded, ties to even on the exact binary value).
double py_round(double x, int ndigits);
// numpy's float64 sum (pairwise summation, as np.add.reduce / np.mean use it).
double numpy_sum(const std::vector<double>& v);

// Scores of one dataset for the result tables.
struct TaskResult {
  std::string task;
  std::string metric;
  size_t samples = 0;
  double score = 0.0;                 // eval.py scorer over all samples
  std::optional<std::array<double, 3>> buckets;  // LongBench-E only
};
TaskResult score_task(const Dataset& ds, const std::vector<Prediction>& preds, bool e);
// JSON (with eval.py's result.json mapping under "official") and a table with one row per task and
// an average row (mean over tasks; NaN buckets left out).
nlohmann::json results_json(const std::vector<TaskResult>& results, bool e, const nlohmann::json& method = nullptr);
Table results_table(const std::vector<TaskResult>& results, bool e, const std::string& title);

}  // namespace drope::tasks::longbench
