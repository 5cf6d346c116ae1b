// LongBench datasets, files, prompts, truncation, metrics and scoring. Expected metric values were
// computed with LongBench's metrics.py and its packages (rouge 1.0.1, jieba 0.42.1, fuzzywuzzy 0.18.0
// without python-Levenshtein) on the same strings.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/tasks/longbench.h"
#include "drope/tasks/metrics.h"

namespace drope::tasks {
namespace {

namespace fs = std::filesystem;
namespace lb = longbench;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

#define EXPECT_ERROR(stmt, needle)                                          \
  do {                                                                      \
    std::string msg_ = error_of([&] { stmt; });                             \
    EXPECT_NE(msg_.find(needle), std::string::npos) << "message: " << msg_; \
  } while (0)

TEST(LongBench, DatasetTable) {
  const auto& all = lb::datasets();
  ASSERT_EQ(all.size(), 21u);
  EXPECT_EQ(all.front().name, "narrativeqa");
  EXPECT_EQ(all.back().name, "repobench-p");
  EXPECT_EQ(lb::parse_tasks("all", true).size(), 13u);
  EXPECT_EQ(lb::dataset("multifieldqa_en").max_new_tokens, 64);
  EXPECT_EQ(lb::dataset("musique").max_new_tokens, 32);
  EXPECT_EQ(lb::dataset("gov_report").max_new_tokens, 512);
  EXPECT_EQ(lb::dataset("lcc").max_new_tokens, 64);
  EXPECT_EQ(lb::dataset("narrativeqa").max_new_tokens, 128);
  EXPECT_EQ(lb::dataset("dureader").metric, lb::Metric::rouge_zh);
  EXPECT_EQ(lb::dataset("multifieldqa_zh").metric, lb::Metric::qa_f1_zh);
  EXPECT_EQ(lb::dataset("triviaqa").metric, lb::Metric::qa_f1);
  EXPECT_EQ(lb::dataset("lsht").metric, lb::Metric::classification);
  EXPECT_EQ(lb::dataset("passage_retrieval_zh").metric, lb::Metric::retrieval_zh);
  EXPECT_EQ(lb::metric_name(lb::dataset("repobench-p").metric), "code_sim_score");
  std::vector<std::string> no_chat, first_line;
  for (const auto& d : all) {
    if (!d.chat_template) no_chat.push_back(d.name);
    if (d.first_line_only) first_line.push_back(d.name);
  }
  EXPECT_EQ(no_chat, (std::vector<std::string>{"trec", "triviaqa", "samsum", "lsht", "lcc", "repobench-p"}));
  EXPECT_EQ(first_line, (std::vector<std::string>{"trec", "triviaqa", "samsum", "lsht"}));
  EXPECT_EQ(lb::dataset("multifieldqa_en").prompt,
            "Read the following text and answer briefly.\n\n{context}\n\nNow, answer the following question based on "
            "the above text, only give me the answer and do not output any other words.\n\nQuestion: {input}\nAnswer:");
  EXPECT_EQ(lb::dataset("lcc").prompt, "Please complete the code given below. \n{context}Next line of code:\n");
  EXPECT_NE(lb::dataset("narrativeqa").prompt.find("asconcisely"), std::string::npos);  // LongBench's typo, kept
  EXPECT_ERROR(lb::dataset("nope"), "unknown LongBench task 'nope'");
  EXPECT_ERROR(lb::parse_tasks("qasper,musique", true), "'musique' has no LongBench-E version");
  EXPECT_ERROR(lb::parse_tasks("qasper,qasper", false), "listed twice");
  EXPECT_EQ(lb::parse_tasks("lcc,trec", false)[1]->name, "trec");
}

TEST(LongBench, PromptFormattingIsStrFormat) {
  nlohmann::json rec = {{"context", "a {x} b }} {{"}, {"input", "Q?"}, {"n", 3}};
  EXPECT_EQ(lb::format_prompt("{{lit}} {context}|{input}|{n}", rec), "{lit} a {x} b }} {{|Q?|3");
  EXPECT_ERROR(lb::format_prompt("{missing}", rec), "'{missing}' is not a key");
  EXPECT_ERROR(lb::format_prompt("{input!r}", rec), "unsupported field");
  EXPECT_ERROR(lb::format_prompt("a } b", rec), "single '}'");
  lb::Sample s;
  s.record = rec;
  EXPECT_EQ(lb::build_prompt(lb::dataset("repobench-p"), s),
            "Please complete the code given below. \na {x} b }} {{Q?Next line of code:\n");
}

TEST(LongBench, MiddleTruncationKeepsBothEnds) {
  std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7};
  auto c = lb::truncate_middle(t, 7);
  EXPECT_FALSE(c.truncated);
  EXPECT_EQ(c.head, t);
  c = lb::truncate_middle(t, 5);  // int(5/2) = 2 from each end
  EXPECT_TRUE(c.truncated);
  EXPECT_EQ(c.head, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(c.tail, (std::vector<int32_t>{6, 7}));
  c = lb::truncate_middle(t, 4);
  EXPECT_EQ(c.head, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(c.tail, (std::vector<int32_t>{6, 7}));
  EXPECT_ERROR(lb::truncate_middle(t, 0), "max_length must be positive");
}

fs::path write_file(const std::string& name, const std::string& text) {
  fs::path dir = fs::path(DROPE_TEST_TMP) / "longbench";
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << text;
  return dir / name;
}

TEST(LongBench, DataFilesAreValidatedWithFileAndLine) {
  const auto& qa = lb::dataset("qasper");
  const std::string good =
      R"({"input": "q", "context": "c", "answers": ["x", 5], "length": 10, "all_classes": null, "_id": "id0"})";
  auto p = write_file("ok.jsonl", good + "\n\n" + good + "\n");
  auto samples = lb::read_samples(p.string(), qa);
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[1].line, 3);
  EXPECT_EQ(samples[0].answers, (std::vector<std::string>{"x", "5"}));
  EXPECT_FALSE(samples[0].all_classes.has_value());
  EXPECT_EQ(lb::read_samples(p.string(), qa, 1).size(), 1u);
  EXPECT_EQ(lb::prediction_line(samples[0], "é\""),
            "{\"_id\":\"id0\",\"all_classes\":null,\"answers\":[\"x\",5],\"length\":10,\"pred\":\"é\\\"\"}\n");

  p = write_file("badjson.jsonl", good + "\n{\"input\": \n");
  EXPECT_ERROR(lb::read_samples(p.string(), qa), p.string() + ":2: invalid JSON");
  p = write_file("missing.jsonl", good + "\n" + R"({"context": "c", "answers": [], "length": 1, "all_classes": null})");
  EXPECT_ERROR(lb::read_samples(p.string(), qa), p.string() + ":2: missing key 'input'");
  p = write_file("type.jsonl", R"({"input": "q", "context": 3, "answers": [], "length": 1, "all_classes": null})");
  EXPECT_ERROR(lb::read_samples(p.string(), qa), ":1: key 'context' must be a string, got number");
  p = write_file("answers.jsonl",
                 R"({"input": "q", "context": "c", "answers": "x", "length": 1, "all_classes": null})");
  EXPECT_ERROR(lb::read_samples(p.string(), qa), ":1: key 'answers' must be a list of strings");
  p = write_file("length.jsonl",
                 R"({"input": "q", "context": "c", "answers": [], "length": "9", "all_classes": null})");
  EXPECT_ERROR(lb::read_samples(p.string(), qa), ":1: key 'length' must be an integer");
  p = write_file("classes.jsonl",
                 R"({"input": "q", "context": "c", "answers": ["A"], "length": 1, "all_classes": null})");
  EXPECT_ERROR(lb::read_samples(p.string(), lb::dataset("trec")), ":1: key 'all_classes' must be a list");
  p = write_file("array.jsonl", "[1, 2]\n");
  EXPECT_ERROR(lb::read_samples(p.string(), qa), ":1: expected a JSON object, got array");
  p = write_file("empty.jsonl", "\n");
  EXPECT_ERROR(lb::read_samples(p.string(), qa), ": no records");
  EXPECT_ERROR(lb::read_samples("/nonexistent/x.jsonl", qa), "/nonexistent/x.jsonl");

  p = write_file("pred.jsonl", R"({"pred": "a", "answers": ["a"], "all_classes": null})"
                               "\n");
  EXPECT_EQ(lb::read_predictions(p.string(), false).size(), 1u);
  EXPECT_ERROR(lb::read_predictions(p.string(), true), ":1: missing key 'length'");
}

TEST(LongBenchMetrics, NormalisationAndF1) {
  EXPECT_EQ(normalize_answer("  The  U.S.A.'s   Ånswer_is an À la carte! "), "usas ånsweris à la carte");
  EXPECT_EQ(normalize_zh_answer("《三体》 作者：刘慈欣。 ABC "), "《三体作者刘慈欣abc");
  EXPECT_EQ(py_lower("ΣΊΣΥΦΟΣ İ"), "σίσυφος i\xCC\x87");  // final sigma, İ → i + combining dot
  EXPECT_DOUBLE_EQ(qa_f1_score("The Eiffel Tower, in Paris!", "eiffel tower"), 0.6666666666666666);
  EXPECT_EQ(qa_f1_score("an apple a day", "the apple-a-day"), 0.0);
  EXPECT_EQ(qa_f1_score("ΣΊΣΥΦΟΣ İstanbul", "σίσυφος i̇stanbul"), 1.0);
  EXPECT_EQ(qa_f1_score("", "x"), 0.0);
  EXPECT_EQ(qa_f1_zh_score("作者是刘慈欣。", "刘慈欣"), 0.5);
  EXPECT_EQ(f1_score({"a", "a", "b"}, {"a", "c"}), 2 * (1.0 / 3) * 0.5 / (1.0 / 3 + 0.5));
}

TEST(LongBenchMetrics, RougeLAsTheRougePackage) {
  EXPECT_EQ(rouge_score("the cat sat on the mat. it was happy", "a cat sat on a mat. the cat was happy"), 0.874999995);
  EXPECT_EQ(rouge_score("hello.  . world", "hello world"), 0.7999999952000001);  // "" counts as a word
  EXPECT_EQ(rouge_score("...", "hello"), 0.0);  // no sentence: the package raises, LongBench scores 0
  EXPECT_EQ(rouge_score("", "x"), 0.0);
  EXPECT_FALSE(rouge_l("", "x").has_value());
  EXPECT_EQ(rouge_zh_score("会议讨论了预算问题，决定增加投入。", "会议决定增加预算投入"), 0.533333328888889);
  // An LCS walk of N+1 `_recon` frames (hypothesis w1..wN without '.', reference "w1"): eval.py scores
  // N = 990 and gets RecursionError (score 0) from N = 991 on; rouge_zh_score one frame earlier.
  auto words = [](int n) {
    std::string s;
    for (int i = 1; i <= n; ++i) s += (i > 1 ? " w" : "w") + std::to_string(i);
    return s;
  };
  EXPECT_GT(rouge_score(words(990), "w1"), 0.0);
  EXPECT_EQ(rouge_score(words(991), "w1"), 0.0);
  EXPECT_GT(rouge_zh_score(words(989), "w1"), 0.0);
  EXPECT_EQ(rouge_zh_score(words(990), "w1"), 0.0);
  EXPECT_GT(rouge_l(words(991), "w1").value_or(0), 0.0);  // without the limit there is a value
}

TEST(LongBenchMetrics, ClassificationCountRetrievalCode) {
  const std::vector<std::string> trec = {"Description", "Abbreviation", "Description and Abbreviation", "Entity"};
  EXPECT_DOUBLE_EQ(classification_score("Type: Description and Abbreviation", "Abbreviation", trec), 1.0 / 3);
  EXPECT_EQ(classification_score("Entity and Location", "Location", {"Entity", "Location", "Human"}), 0.5);
  // metrics.py removes from the list it iterates over: "Description" is skipped and survives.
  EXPECT_EQ(
      classification_score("Abbreviation, Description, Abbreviation and Description", "Abbreviation and Description",
                           {"Abbreviation", "Description", "Abbreviation and Description"}),
      0.5);
  EXPECT_EQ(classification_score("nothing", "Entity", trec), 0.0);
  EXPECT_EQ(count_score("There are 12 unique, not 12.5 or 3", "12"), 0.5);
  EXPECT_EQ(count_score("٣ or 3", "3"), 0.5);  // \d is any Unicode decimal digit
  EXPECT_EQ(count_score("none", "3"), 0.0);
  EXPECT_EQ(retrieval_score("Paragraph 7, maybe Paragraph 17", "Paragraph 7"), 0.5);
  EXPECT_EQ(retrieval_zh_score("段落3", "段落3"), 1.0);
  EXPECT_ERROR(retrieval_score("1", "no paragraph"), "holds no 'Paragraph <number>'");
  EXPECT_EQ(fuzz_ratio("return foo(x)", "return bar(x);"), 74);
  EXPECT_EQ(code_sim_score("\n\n# c\n```\nreturn foo(x)\nnext", "return bar(x);"), 0.74);
  EXPECT_EQ(code_sim_score("", ""), 1.0);        // fuzz.ratio: equal strings first
  EXPECT_EQ(code_sim_score("# only", ""), 1.0);  // every line skipped → "" == ""
  EXPECT_EQ(code_sim_score("x", ""), 0.0);
  // difflib's autojunk: in a b of 200+ elements, 'x' (250 > 3 times) is popular and cannot seed a match.
  std::u32string a = std::u32string(150, U'x') + std::u32string(60, U'y') + U"abc";
  std::u32string b = std::u32string(3, U'y') + std::u32string(250, U'x') + U"abc";
  EXPECT_EQ(sequence_matcher_ratio(a, b), 0.0255863539445629);
}

TEST(LongBenchScoring, EvalPyAggregation) {
  EXPECT_EQ(lb::py_round(12.625, 2), 12.62);  // exact tie → even
  EXPECT_EQ(lb::py_round(2.675, 2), 2.67);    // binary value below the tie
  EXPECT_EQ(lb::py_round(1.005 * 100, 2), 100.5);
  EXPECT_TRUE(std::isnan(lb::py_round(std::nan(""), 2)));
  std::vector<double> v;
  for (int i = 0; i < 300; ++i) v.push_back(1.0 / (i + 3));
  double seq = 0.0;
  for (double x : v) seq += x;
  EXPECT_NEAR(lb::numpy_sum(v), seq, 1e-12);
  EXPECT_EQ(lb::numpy_sum({0.1, 0.2, 0.3}), 0.1 + 0.2 + 0.3);

  const auto& trivia = lb::dataset("triviaqa");
  EXPECT_EQ(lb::post_process(trivia, "\n\nParis\nQuestion: next"), "Paris");
  EXPECT_EQ(lb::post_process(lb::dataset("qasper"), "\nParis\nx"), "\nParis\nx");
  std::vector<lb::Prediction> preds(3);
  preds[0].pred = "\nParis\nLondon";
  preds[0].answers = {"London", "Paris"};
  preds[0].length = 100;
  preds[1].pred = "London";
  preds[1].answers = {"Paris"};
  preds[1].length = 5000;
  preds[2].pred = "the paris";
  preds[2].answers = {"Paris France"};
  preds[2].length = 4000;
  EXPECT_EQ(lb::score(trivia, preds), lb::py_round(100 * (1.0 + 0.0 + 2 * 1.0 * 0.5 / 1.5) / 3, 2));
  auto e = lb::score_e(trivia, preds);
  EXPECT_EQ(e[0], 100.0);
  EXPECT_EQ(e[1], lb::py_round(100 * ((0.0 + 2 * 1.0 * 0.5 / 1.5) / 2), 2));
  EXPECT_TRUE(std::isnan(e[2]));  // empty bucket: np.mean([]) is nan
  EXPECT_EQ(lb::bucket_of(3999), 0u);
  EXPECT_EQ(lb::bucket_of(4000), 1u);
  EXPECT_EQ(lb::bucket_of(8000), 2u);

  // Classification uses the last record's all_classes for every record, as eval.py.
  const auto& trec = lb::dataset("trec");
  std::vector<lb::Prediction> cls(2);
  cls[0].pred = "Entity";
  cls[0].answers = {"Entity"};
  cls[1].pred = "Entity";
  cls[1].answers = {"Entity"};
  cls[1].all_classes = std::vector<std::string>{"Entity", "Human"};
  EXPECT_EQ(lb::score(trec, cls), 100.0);
  cls[1].all_classes.reset();
  EXPECT_ERROR(lb::score(trec, cls), "needs all_classes");

  auto r1 = lb::score_task(trivia, preds, true);
  auto r2 = lb::score_task(lb::dataset("qasper"), preds, true);
  auto t = lb::results_table({r1, r2}, true, "LongBench-E");
  ASSERT_EQ(t.rows.size(), 3u);
  EXPECT_EQ(t.columns, (std::vector<std::string>{"task", "metric", "samples", "score", "0-4k", "4-8k", "8k+"}));
  EXPECT_EQ(t.rows[2][0], "average");
  EXPECT_EQ(t.rows[2][6], "nan");
  auto j = lb::results_json({r1, r2}, true);
  EXPECT_EQ(j["official"]["triviaqa"]["0-4k"], 100.0);
  EXPECT_TRUE(j["official"]["triviaqa"]["8k+"].is_null());
  EXPECT_EQ(j["samples"], 6);
}

}  // namespace
}  // namespace drope::tasks
