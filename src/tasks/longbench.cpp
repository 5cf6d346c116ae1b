// LongBench v1 datasets, files and scoring. The prompt strings are LongBench's
// config/dataset2prompt.json verbatim (including its typos, e.g. "asconcisely"), since any change
// alters model outputs and so the scores.
#include "drope/tasks/longbench.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <set>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/json.h"
#include "drope/tasks/metrics.h"
#include "drope/text/jsonl.h"

namespace drope::tasks::longbench {

namespace {

using nlohmann::json;

constexpr const char* kMultiDocQA =
    "Answer the question based on the given passages. Only give me the answer and do not output any other "
    "words.\n\nThe following are given passages.\n{context}\n\nAnswer the question based on the given passages. "
    "Only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:";

// One dataset of LongBench's config files (dataset2prompt.json, dataset2maxlen.json) and of its metrics.
struct Row {
  const char* name;
  const char* prompt;
  int64_t max_new;
  Metric metric;
  bool e;  // in LongBench-E
};
using M = Metric;
constexpr Row kRows[] = {
    {"narrativeqa",
     "You are given a story, which can be either a novel or a movie script, and a question. Answer the question "
     "asconcisely as you can, using a single phrase if possible. Do not provide any explanation.\n\nStory: "
     "{context}\n\nNow, answer the question based on the story asconcisely as you can, using a single phrase if "
     "possible. Do not provide any explanation.\n\nQuestion: {input}\n\nAnswer:",
     128, M::qa_f1, false},
    {"qasper",
     "You are given a scientific article and a question. Answer the question as concisely as you can, using a "
     "single phrase or sentence if possible. If the question cannot be answered based on the information in the "
     "article, write \"unanswerable\". If the question is a yes/no question, answer \"yes\", \"no\", or "
     "\"unanswerable\". Do not provide any explanation.\n\nArticle: {context}\n\n Answer the question based on "
     "the above article as concisely as you can, using a single phrase or sentence if possible. If the question "
     "cannot be answered based on the information in the article, write \"unanswerable\". If the question is a "
     "yes/no question, answer \"yes\", \"no\", or \"unanswerable\". Do not provide any explanation.\n\nQuestion: "
     "{input}\n\nAnswer:",
     128, M::qa_f1, true},
    {"multifieldqa_en",
     "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on "
     "the above text, only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:",
     64, M::qa_f1, true},
    {"multifieldqa_zh",
     "阅读以下文字并用中文简短回答：\n\n{context}\n\n现在请基于上面的文章回答下面的问题，只告诉我答案，不要输出任何其他字词。"
     "\n\n问题：{input}\n回答：",
     64, M::qa_f1_zh, false},
    {"hotpotqa", kMultiDocQA, 32, M::qa_f1, true},
    {"2wikimqa", kMultiDocQA, 32, M::qa_f1, true},
    {"musique", kMultiDocQA, 32, M::qa_f1, false},
    {"dureader",
     "请基于给定的文章回答下述问题。\n\n文章：{context}\n\n请基于上述文章回答下面的问题。\n\n问题：{input}\n回答：",
     128, M::rouge_zh, false},
    {"gov_report",
     "You are given a report by a government agency. Write a one-page summary of the report.\n\nReport:\n"
     "{context}\n\nNow, write a one-page summary of the report.\n\nSummary:",
     512, M::rouge, true},
    {"qmsum",
     "You are given a meeting transcript and a query containing a question or instruction. Answer the query in "
     "one or more sentences.\n\nTranscript:\n{context}\n\nNow, answer the query based on the above meeting "
     "transcript in one or more sentences.\n\nQuery: {input}\nAnswer:",
     512, M::rouge, false},
    {"multi_news",
     "You are given several news passages. Write a one-page summary of all news. \n\nNews:\n{context}\n\nNow, "
     "write a one-page summary of all the news.\n\nSummary:",
     512, M::rouge, true},
    {"vcsum", "下面有一段会议记录，请你阅读后，写一段总结，总结会议的内容。\n会议记录：\n{context}\n\n会议总结：", 512,
     M::rouge_zh, false},
    {"trec",
     "Please determine the type of the question below. Here are some examples of questions.\n\n{context}\n{input}", 64,
     M::classification, true},
    {"triviaqa",
     "Answer the question based on the given passage. Only give me the answer and do not output any other words. "
     "The following are some examples.\n\n{context}\n\n{input}",
     32, M::qa_f1, true},
    {"samsum",
     "Summarize the dialogue into a few short sentences. The following are some examples.\n\n{context}\n\n{input}", 128,
     M::rouge, true},
    {"lsht", "请判断给定新闻的类别，下面是一些例子。\n\n{context}\n{input}", 64, M::classification, false},
    {"passage_count",
     "There are some paragraphs below sourced from Wikipedia. Some of them may be duplicates. Please carefully "
     "read these paragraphs and determine how many unique paragraphs there are after removing duplicates. In "
     "other words, how many non-repeating paragraphs are there in total?\n\n{context}\n\nPlease enter the final "
     "count of unique paragraphs after removing duplicates. The output format should only contain the number, "
     "such as 1, 2, 3, and so on.\n\nThe final answer is: ",
     32, M::count, true},
    {"passage_retrieval_en",
     "Here are 30 paragraphs from Wikipedia, along with an abstract. Please determine which paragraph the "
     "abstract is from.\n\n{context}\n\nThe following is an abstract.\n\n{input}\n\nPlease enter the number of "
     "the paragraph that the abstract is from. The answer format must be like \"Paragraph 1\", \"Paragraph 2\", "
     "etc.\n\nThe answer is: ",
     32, M::retrieval, true},
    {"passage_retrieval_zh",
     "以下是若干段落文字，以及其中一个段落的摘要。请确定给定的摘要出自哪一段。\n\n{context}\n\n下面是一个摘要\n\n{input}\n\n"
     "请输入摘要所属段落的编号。答案格式必须是\"段落1\"，\"段落2\"等格式\n\n答案是：",
     32, M::retrieval_zh, false},
    {"lcc", "Please complete the code given below. \n{context}Next line of code:\n", 64, M::code_sim, true},
    {"repobench-p", "Please complete the code given below. \n{context}{input}Next line of code:\n", 64, M::code_sim,
     true},
};

std::vector<Dataset> make_datasets() {
  // pred.py: "chat models are better off without build prompts on these tasks"; eval.py cuts the
  // prediction to its first line for the first four of them.
  const std::set<std::string> no_chat = {"trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"};
  const std::set<std::string> first_line = {"trec", "triviaqa", "samsum", "lsht"};
  std::vector<Dataset> out;
  for (const auto& r : kRows) {
    Dataset d;
    d.name = r.name;
    d.prompt = r.prompt;
    d.max_new_tokens = r.max_new;
    d.metric = r.metric;
    d.chat_template = no_chat.count(d.name) == 0;
    d.first_line_only = first_line.count(d.name) != 0;
    d.in_longbench_e = r.e;
    out.push_back(std::move(d));
  }
  return out;
}

std::string names_of(bool e) {
  std::string s;
  for (const auto& d : datasets())
    if (!e || d.in_longbench_e) s += (s.empty() ? "" : ", ") + d.name;
  return s;
}

const json& require(const json& j, const char* key, const std::string& path, int64_t line) {
  auto it = j.find(key);
  if (it == j.end()) fail("{}:{}: missing key '{}'", path, line, key);
  return *it;
}

std::string require_string(const json& j, const char* key, const std::string& path, int64_t line) {
  const json& v = require(j, key, path, line);
  if (!v.is_string()) fail("{}:{}: key '{}' must be a string, got {}", path, line, key, v.type_name());
  return v.get<std::string>();
}

std::vector<std::string> string_list(const json& v, const char* key, const std::string& path, int64_t line) {
  if (!v.is_array()) fail("{}:{}: key '{}' must be a list of strings, got {}", path, line, key, v.type_name());
  std::vector<std::string> out;
  for (const auto& x : v) {
    if (x.is_string()) out.push_back(x.get<std::string>());
    else if (x.is_number_integer()) out.push_back(x.dump());  // str(int), e.g. passage_count answers
    else fail("{}:{}: key '{}' must be a list of strings, has an element of type {}", path, line, key, x.type_name());
  }
  return out;
}

std::optional<std::vector<std::string>> classes(const json& j, const std::string& path, int64_t line,
                                                const Dataset* ds) {
  const json& v = require(j, "all_classes", path, line);
  if (v.is_null()) {
    if (ds && ds->metric == Metric::classification)
      fail("{}:{}: key 'all_classes' must be a list of class names for {} (classification), got null", path, line,
           ds->name);
    return std::nullopt;
  }
  return string_list(v, "all_classes", path, line);
}

int64_t integer(const json& v, const char* key, const std::string& path, int64_t line) {
  if (!v.is_number()) fail("{}:{}: key '{}' must be an integer, got {}", path, line, key, v.type_name());
  return json_int64(v, fmt::format("{}:{}: key '{}'", path, line, key));
}

}  // namespace

std::string metric_name(Metric m) {
  switch (m) {
    case Metric::qa_f1: return "qa_f1_score";
    case Metric::qa_f1_zh: return "qa_f1_zh_score";
    case Metric::rouge: return "rouge_score";
    case Metric::rouge_zh: return "rouge_zh_score";
    case Metric::classification: return "classification_score";
    case Metric::retrieval: return "retrieval_score";
    case Metric::retrieval_zh: return "retrieval_zh_score";
    case Metric::count: return "count_score";
    case Metric::code_sim: return "code_sim_score";
  }
  return "?";
}

const std::vector<Dataset>& datasets() {
  static const std::vector<Dataset> all = make_datasets();
  return all;
}

const Dataset& dataset(std::string_view name) {
  for (const auto& d : datasets())
    if (d.name == name) return d;
  fail("unknown LongBench task '{}' (known: {})", name, names_of(false));
}

std::vector<const Dataset*> parse_tasks(const std::string& spec, bool e) {
  std::vector<const Dataset*> out;
  if (spec == "all") {
    for (const auto& d : datasets())
      if (!e || d.in_longbench_e) out.push_back(&d);
    return out;
  }
  size_t start = 0;
  for (;;) {
    size_t comma = spec.find(',', start);
    std::string name = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (name.empty()) fail("--tasks '{}': empty task name", spec);
    const Dataset& d = dataset(name);
    if (e && !d.in_longbench_e)
      fail("--tasks: '{}' has no LongBench-E version (LongBench-E tasks: {})", name, names_of(true));
    for (const auto* p : out)
      if (p == &d) fail("--tasks '{}': '{}' is listed twice", spec, name);
    out.push_back(&d);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::vector<Sample> read_samples(const std::string& path, const Dataset& ds, int64_t limit) {
  std::vector<Sample> out;
  text::for_each_jsonl_object(path, [&](int64_t line, const json& j) {
    Sample s;
    s.line = line;
    require_string(j, "input", path, line);
    require_string(j, "context", path, line);
    s.answers = string_list(require(j, "answers", path, line), "answers", path, line);
    s.all_classes = classes(j, path, line, &ds);
    s.length = integer(require(j, "length", path, line), "length", path, line);
    s.record = j;
    out.push_back(std::move(s));
    return limit <= 0 || static_cast<int64_t>(out.size()) < limit;
  });
  if (out.empty()) fail("{}: no records", path);
  return out;
}

std::string format_prompt(std::string_view tmpl, const json& record) {
  std::string out;
  for (size_t i = 0; i < tmpl.size(); ++i) {
    char c = tmpl[i];
    if (c == '}') {
      if (i + 1 < tmpl.size() && tmpl[i + 1] == '}') {
        out += '}';
        ++i;
        continue;
      }
      fail("prompt template: single '}}' at offset {}", i);
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < tmpl.size() && tmpl[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    size_t close = tmpl.find('}', i);
    if (close == std::string_view::npos) fail("prompt template: unmatched '{{' at offset {}", i);
    std::string name(tmpl.substr(i + 1, close - i - 1));
    if (name.empty() || name.find_first_of("{!:.[") != std::string::npos)
      fail("prompt template: unsupported field '{{{}}}' (only plain {{name}} fields)", name);
    auto it = record.find(name);
    if (it == record.end()) fail("prompt template field '{{{}}}' is not a key of the record", name);
    if (it->is_string()) out += it->get<std::string>();
    else if (it->is_number_integer()) out += it->dump();
    else fail("prompt template field '{{{}}}': the record's value is a {}, not text", name, it->type_name());
    i = close;
  }
  return out;
}

std::string build_prompt(const Dataset& ds, const Sample& s) { return format_prompt(ds.prompt, s.record); }

MiddleCut truncate_middle(const std::vector<int32_t>& tokens, int64_t max_length) {
  MiddleCut cut;
  if (max_length <= 0) fail("max_length must be positive, got {}", max_length);
  if (static_cast<int64_t>(tokens.size()) <= max_length) {
    cut.head = tokens;
    return cut;
  }
  const size_t half = static_cast<size_t>(max_length / 2);  // int(max_length/2)
  cut.truncated = true;
  cut.head.assign(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(half));
  cut.tail.assign(tokens.end() - static_cast<std::ptrdiff_t>(half), tokens.end());
  return cut;
}

std::string prediction_line(const Sample& s, const std::string& pred) {
  json j;
  j["pred"] = pred;
  j["answers"] = s.record.at("answers");
  j["all_classes"] = s.record.at("all_classes");
  j["length"] = s.length;
  if (s.record.contains("_id")) j["_id"] = s.record.at("_id");
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::vector<Prediction> read_predictions(const std::string& path, bool need_length) {
  std::vector<Prediction> out;
  text::for_each_jsonl_object(path, [&](int64_t line, const json& j) {
    Prediction p;
    p.line = line;
    p.pred = require_string(j, "pred", path, line);
    p.answers = string_list(require(j, "answers", path, line), "answers", path, line);
    p.all_classes = classes(j, path, line, nullptr);
    if (j.contains("length")) p.length = integer(j.at("length"), "length", path, line);
    else if (need_length) fail("{}:{}: missing key 'length' (LongBench-E scores by length)", path, line);
    out.push_back(std::move(p));
    return true;
  });
  if (out.empty()) fail("{}: no predictions", path);
  return out;
}

std::string post_process(const Dataset& ds, std::string_view prediction) {
  if (!ds.first_line_only) return std::string(prediction);
  size_t b = prediction.find_first_not_of('\n');
  if (b == std::string_view::npos) return "";
  std::string_view rest = prediction.substr(b);
  return std::string(rest.substr(0, rest.find('\n')));
}

double metric_score(Metric m, std::string_view prediction, std::string_view ground_truth,
                    const std::optional<std::vector<std::string>>& all_classes) {
  switch (m) {
    case Metric::qa_f1: return qa_f1_score(prediction, ground_truth);
    case Metric::qa_f1_zh: return qa_f1_zh_score(prediction, ground_truth);
    case Metric::rouge: return rouge_score(prediction, ground_truth);
    case Metric::rouge_zh: return rouge_zh_score(prediction, ground_truth);
    case Metric::classification:
      if (!all_classes) fail("classification_score needs all_classes, the records have null");
      return classification_score(prediction, ground_truth, *all_classes);
    case Metric::retrieval: return retrieval_score(prediction, ground_truth);
    case Metric::retrieval_zh: return retrieval_zh_score(prediction, ground_truth);
    case Metric::count: return count_score(prediction, ground_truth);
    case Metric::code_sim: return code_sim_score(prediction, ground_truth);
  }
  return 0.0;
}

double sample_score(const Dataset& ds, std::string_view prediction, const std::vector<std::string>& answers,
                    const std::optional<std::vector<std::string>>& all_classes) {
  const std::string pred = post_process(ds, prediction);
  double best = 0.0;
  for (const auto& gt : answers) best = std::max(best, metric_score(ds.metric, pred, gt, all_classes));
  return best;
}

double py_round(double x, int ndigits) {
  if (!std::isfinite(x)) return x;
  // glibc's printf rounds the exact binary value correctly (ties to even), like CPython's dtoa.
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.*f", ndigits, x);
  return std::strtod(buf, nullptr);
}

double numpy_sum(const std::vector<double>& v) {
  // numpy's pairwise_sum: blocks of 8 accumulators up to 128 elements, recursive halving above.
  struct Pairwise {
    static double sum(const double* a, size_t n) {
      if (n < 8) {
        double r = 0.0;
        for (size_t i = 0; i < n; ++i) r += a[i];
        return r;
      }
      if (n <= 128) {
        double r[8];
        for (int k = 0; k < 8; ++k) r[k] = a[k];
        size_t i = 8;
        for (; i < n - (n % 8); i += 8)
          for (int k = 0; k < 8; ++k) r[k] += a[i + static_cast<size_t>(k)];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
      }
      size_t n2 = n / 2;
      n2 -= n2 % 8;
      return sum(a, n2) + sum(a + n2, n - n2);
    }
  };
  return Pairwise::sum(v.data(), v.size());
}

double score(const Dataset& ds, const std::vector<Prediction>& preds) {
  if (preds.empty()) fail("{}: no predictions to score", ds.name);
  const auto& all_classes = preds.back().all_classes;
  double total = 0.0;
  for (const auto& p : preds) total += sample_score(ds, p.pred, p.answers, all_classes);
  return py_round(100 * total / static_cast<double>(preds.size()), 2);
}

size_t bucket_of(int64_t length) { return length < 4000 ? 0 : length < 8000 ? 1 : 2; }

std::array<double, 3> score_e(const Dataset& ds, const std::vector<Prediction>& preds) {
  if (preds.empty()) fail("{}: no predictions to score", ds.name);
  const auto& all_classes = preds.back().all_classes;
  std::array<std::vector<double>, 3> scores;
  for (const auto& p : preds) {
    if (!p.length) fail("{}: prediction on line {} has no 'length'", ds.name, p.line);
    scores[bucket_of(*p.length)].push_back(sample_score(ds, p.pred, p.answers, all_classes));
  }
  std::array<double, 3> out{};
  for (size_t b = 0; b < 3; ++b) {
    double mean = scores[b].empty() ? std::nan("") : numpy_sum(scores[b]) / static_cast<double>(scores[b].size());
    out[b] = py_round(100 * mean, 2);
  }
  return out;
}

TaskResult score_task(const Dataset& ds, const std::vector<Prediction>& preds, bool e) {
  TaskResult r;
  r.task = ds.name;
  r.metric = metric_name(ds.metric);
  r.samples = preds.size();
  r.score = score(ds, preds);
  if (e) r.buckets = score_e(ds, preds);
  return r;
}

namespace {

// Mean over tasks of one column, NaN entries left out (NaN when none is left).
double column_mean(const std::vector<TaskResult>& results, const std::function<double(const TaskResult&)>& get) {
  double sum = 0.0;
  size_t n = 0;
  for (const auto& r : results) {
    double v = get(r);
    if (std::isnan(v)) continue;
    sum += v;
    ++n;
  }
  return n ? py_round(sum / static_cast<double>(n), 2) : std::nan("");
}

json number_or_null(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

}  // namespace

json results_json(const std::vector<TaskResult>& results, bool e, const json& method) {
  json j;
  j["benchmark"] = e ? "LongBench-E" : "LongBench";
  if (!method.is_null()) j["method"] = method;
  json tasks = json::object(), official = json::object();
  size_t samples = 0;
  for (const auto& r : results) {
    json t = {{"metric", r.metric}, {"samples", r.samples}, {"score", r.score}};
    samples += r.samples;
    if (r.buckets) {
      json b = json::object();
      for (size_t k = 0; k < 3; ++k) b[kBuckets[k]] = number_or_null((*r.buckets)[k]);
      t["buckets"] = b;
      official[r.task] = b;
    } else {
      official[r.task] = r.score;
    }
    tasks[r.task] = t;
  }
  j["tasks"] = tasks;
  j["samples"] = samples;
  json avg = {{"score", number_or_null(column_mean(results, [](const TaskResult& r) { return r.score; }))}};
  if (e)
    for (size_t k = 0; k < 3; ++k)
      avg[kBuckets[k]] = number_or_null(
          column_mean(results, [k](const TaskResult& r) { return r.buckets ? (*r.buckets)[k] : std::nan(""); }));
  j["average"] = avg;
  j["official"] = official;  // eval.py's result.json
  return j;
}

Table results_table(const std::vector<TaskResult>& results, bool e, const std::string& title) {
  Table t;
  t.title = title;
  t.columns = {"task", "metric", "samples", "score"};
  if (e)
    for (const auto& b : kBuckets) t.columns.push_back(b);
  size_t samples = 0;
  for (const auto& r : results) {
    std::vector<std::string> row = {r.task, r.metric, std::to_string(r.samples), fixed(r.score)};
    if (e)
      for (size_t k = 0; k < 3; ++k) row.push_back(r.buckets ? fixed((*r.buckets)[k]) : "");
    t.add_row(std::move(row));
    samples += r.samples;
  }
  std::vector<std::string> avg = {"average", "", std::to_string(samples),
                                  fixed(column_mean(results, [](const TaskResult& r) { return r.score; }))};
  if (e)
    for (size_t k = 0; k < 3; ++k)
      avg.push_back(
          fixed(column_mean(results, [k](const TaskResult& r) { return r.buckets ? (*r.buckets)[k] : std::nan(""); })));
  t.add_row(std::move(avg));
  return t;
}

}  // namespace drope::tasks::longbench
