// NIAH prompts (docs/design.md#needle-in-a-haystack): RULER's text facts, determinism, needle placement,
// sizing by search, the Kamradt grid's snapping, scoring and bad input. Tokens are counted as
// whitespace-separated words so every size is exactly predictable.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>

#include <gtest/gtest.h>

#include "drope/core/error.h"
#include "drope/tasks/niah.h"

namespace drope::tasks {
namespace {

namespace fs = std::filesystem;

int64_t word_count(const std::string& s) {
  int64_t n = 0;
  bool in = false;
  for (char c : s) {
    const bool space = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (!space && !in) ++n;
    in = !space;
  }
  return n;
}
const TokenCounter kWords = word_count;

size_t count_of(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t p = hay.find(needle); p != std::string::npos; p = hay.find(needle, p + 1)) ++n;
  return n;
}

// Prose whose sentences are numbered ("S17"), so a needle's sentence position can be read off the text.
const EssayText& test_essay() {
  static const EssayText e = [] {
    std::string text;
    for (int i = 0; i < 400; ++i) {
      text += "S" + std::to_string(i) + " tells a short story about the " + (i % 3 ? "river" : "old mill") + ". ";
      if (i % 25 == 24) text += "\n\n";
    }
    return make_essay(text, "test-essay");
  }();
  return e;
}

std::string expect_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a drope::Error";
  return "";
}

std::string tmp_dir(const std::string& name) {
  auto dir = fs::path(DROPE_TEST_TMP) / "niah" / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

void write(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
}

// ---- RULER's text facts -----------------------------------------------------------------------------

TEST(NiahText, NeedleAndKeyJoin) {
  EXPECT_EQ(niah_needle(NeedleKind::numbers, "brave-otter", "1234567"),
            "One of the special magic numbers for brave-otter is: 1234567.");
  EXPECT_EQ(niah_needle(NeedleKind::uuids, "k", "v"), "One of the special magic uuids for k is: v.");
  EXPECT_EQ(join_query_keys({"a"}), "a");
  EXPECT_EQ(join_query_keys({"a", "b"}), "a, and b");
  EXPECT_EQ(join_query_keys({"k1", "k2", "k3", "k4"}), "k1, k2, k3, and k4");
  EXPECT_STREQ(kNoiseUnit, "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.");
}

TEST(NiahText, PluralTemplateExactly) {
  EXPECT_EQ(niah_prompt(NeedleKind::numbers, "CTX", {"k1", "k2", "k3", "k4"}, 4),
            "Some special magic numbers are hidden within the following text. Make sure to memorize it. I will quiz "
            "you about the numbers afterwards.\nCTX\nWhat are all the special magic numbers for k1, k2, k3, and k4 "
            "mentioned in the provided text? The special magic numbers for k1, k2, k3, and k4 mentioned in the "
            "provided text are");
  // Multi-value: one key, four values asked → still plural.
  EXPECT_EQ(niah_answer_prefix(NeedleKind::numbers, {"k"}, 4),
            " The special magic numbers for k mentioned in the provided text are");
}

TEST(NiahText, SingularRewriteExactly) {
  EXPECT_EQ(niah_prompt(NeedleKind::numbers, "CTX", {"k"}, 1),
            "A special magic number is hidden within the following text. Make sure to memorize it. I will quiz you "
            "about the number afterwards.\nCTX\nWhat is the special magic number for k mentioned in the provided "
            "text? The special magic number for k mentioned in the provided text is");
  const std::string u = niah_prompt(NeedleKind::uuids, "x", {"k"}, 1);
  EXPECT_EQ(u.rfind("A special magic uuid is hidden", 0), 0u) << u;
  EXPECT_NE(u.find("What is the special magic uuid for k mentioned"), std::string::npos) << u;
  // The rewrite applies to the template only, never to the context or keys.
  const std::string c = niah_prompt(NeedleKind::words, "Some are {query} here", {"are-{context}"}, 1);
  EXPECT_NE(c.find("\nSome are {query} here\n"), std::string::npos) << c;
  EXPECT_NE(c.find("special magic word for are-{context} mentioned"), std::string::npos) << c;
}

TEST(NiahText, QuestionIsThePromptAfterTheContext) {
  for (int64_t asked : {1, 2})
    for (auto kind : {NeedleKind::numbers, NeedleKind::words}) {
      const auto prompt = niah_prompt(kind, "CONTEXT", {"alpha-beta", "gamma-delta"}, asked);
      const auto question = niah_question(kind, {"alpha-beta", "gamma-delta"}, asked);
      ASSERT_GE(prompt.size(), question.size());
      EXPECT_EQ(prompt.substr(prompt.size() - question.size()), question);
      EXPECT_EQ(prompt.substr(prompt.find("CONTEXT") + 7), question);
    }
  EXPECT_EQ(niah_question(NeedleKind::numbers, {"k"}, 1),
            "\nWhat is the special magic number for k mentioned in the provided text? The special magic number "
            "for k mentioned in the provided text is");
}

TEST(NiahText, PresetsFollowRuler) {
  const auto& t = niah_tasks();
  ASSERT_EQ(t.size(), 8u);
  auto get = [&](const std::string& n) {
    for (const auto& x : t)
      if (x.name == n) return x;
    ADD_FAILURE() << n;
    return NiahTask{};
  };
  EXPECT_EQ(get("single_1").haystack, Haystack::noise);
  EXPECT_EQ(get("single_2").haystack, Haystack::essay);
  EXPECT_EQ(get("single_3").value_kind, NeedleKind::uuids);
  EXPECT_EQ(get("multikey_1").num_keys, 4);
  EXPECT_EQ(get("multikey_1").num_queries, 1);
  EXPECT_EQ(get("multikey_2").haystack, Haystack::needle);
  EXPECT_EQ(get("multikey_3").key_kind, NeedleKind::uuids);
  EXPECT_EQ(get("multikey_3").value_kind, NeedleKind::uuids);
  EXPECT_EQ(get("multivalue").num_values, 4);
  EXPECT_EQ(get("multiquery").num_keys, 4);
  EXPECT_EQ(get("multiquery").num_queries, 4);
}

TEST(NiahText, TaskListParsing) {
  EXPECT_EQ(parse_niah_tasks("all").size(), 8u);
  auto paper = parse_niah_tasks("paper");
  ASSERT_EQ(paper.size(), 3u);
  EXPECT_EQ(paper[0].name, "multiquery");
  auto two = parse_niah_tasks("niah_single_1, single_1,multivalue");
  ASSERT_EQ(two.size(), 2u);
  EXPECT_EQ(two[1].name, "multivalue");
  const std::string msg = expect_error([] { parse_niah_tasks("single_1,bogus"); });
  EXPECT_NE(msg.find("--tasks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bogus"), std::string::npos) << msg;
  EXPECT_NE(msg.find("multikey_3"), std::string::npos) << msg;  // lists the known names
  EXPECT_THROW(parse_niah_tasks("single_1,,multivalue"), Error);
  EXPECT_THROW(parse_niah_tasks(""), Error);
}

TEST(NiahText, WordListsAndItems) {
  const auto& adj = niah_adjectives();
  const auto& noun = niah_nouns();
  EXPECT_GE(adj.size(), 200u);
  EXPECT_GE(noun.size(), 200u);
  std::set<std::string> a(adj.begin(), adj.end()), n(noun.begin(), noun.end());
  EXPECT_EQ(a.size(), adj.size());
  EXPECT_EQ(n.size(), noun.size());
  for (const auto& w : adj) {
    EXPECT_TRUE(std::regex_match(w, std::regex("[a-z]+"))) << w;
    EXPECT_EQ(n.count(w), 0u) << w;
  }
  for (const auto& w : noun) EXPECT_TRUE(std::regex_match(w, std::regex("[a-z]+"))) << w;

  std::mt19937_64 rng(3);
  for (int i = 0; i < 2000; ++i) {
    const std::string num = draw_needle_item(rng, NeedleKind::numbers);
    ASSERT_EQ(num.size(), 7u);
    const long v = std::stol(num);
    EXPECT_TRUE(v >= 1000000 && v <= 9999999) << num;
    const std::string u = draw_needle_item(rng, NeedleKind::uuids);
    EXPECT_TRUE(std::regex_match(u, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")))
        << u;
    const std::string w = draw_needle_item(rng, NeedleKind::words);
    const auto dash = w.find('-');
    ASSERT_NE(dash, std::string::npos) << w;
    EXPECT_EQ(a.count(w.substr(0, dash)), 1u) << w;
    EXPECT_EQ(n.count(w.substr(dash + 1)), 1u) << w;
  }
}

TEST(NiahText, BoundedDrawsAndSeeds) {
  std::mt19937_64 rng(11);
  std::vector<int> hist(7, 0);
  for (int i = 0; i < 70000; ++i) {
    const uint64_t x = draw_below(rng, 7);
    ASSERT_LT(x, 7u);
    ++hist[x];
  }
  for (int h : hist) EXPECT_NEAR(h, 10000, 500);
  for (int i = 0; i < 1000; ++i) {
    const double u = draw_unit(rng);
    EXPECT_TRUE(u >= 0.0 && u < 1.0);
  }
  EXPECT_EQ(derive_seed(1, {2, 3}), derive_seed(1, {2, 3}));
  EXPECT_NE(derive_seed(1, {2, 3}), derive_seed(1, {3, 2}));
  EXPECT_NE(derive_seed(1, {2, 3}), derive_seed(2, {2, 3}));
  // FNV-1a is fixed by its definition (seeds must not depend on the standard library's std::hash).
  EXPECT_EQ(stable_hash(""), 14695981039346656037ULL);
  EXPECT_EQ(stable_hash("a"), 0xaf63dc4c8601ec8cULL);
}

// ---- sentence splitting -----------------------------------------------------------------------------

TEST(NiahEssay, SentenceSplitting) {
  const std::string text =
      "Mr. Smith went to Washington. He saw the U.S. Capitol! Was it big? \"Yes,\" she said. See section 2. "
      "It has parts, e.g. Wheels and more (really.) Next one.\n\nHeading without period\n\n1. Definitions apply "
      "here.\nBody text, i.e. the rest";
  const std::vector<std::string> want = {"Mr. Smith went to Washington.",
                                         "He saw the U.S. Capitol!",
                                         "Was it big?",
                                         "\"Yes,\" she said.",
                                         "See section 2.",
                                         "It has parts, e.g. Wheels and more (really.)",
                                         "Next one.",
                                         "Heading without period",
                                         "1. Definitions apply here.",
                                         "Body text, i.e. the rest"};
  EXPECT_EQ(split_sentences(text), want);
  const EssayText e = make_essay(text, "t");
  EXPECT_EQ(e.sentence_starts.size(), want.size());
  EXPECT_EQ(e.sentence_starts[0], 0);
  EXPECT_EQ(e.sentence_end.back(), 1);
  // An excerpt wraps around to the beginning.
  const auto wrapped = essay_sentences(e, e.sentence_starts.back(), 8);
  ASSERT_EQ(wrapped.size(), 2u);
  EXPECT_EQ(wrapped[0], "Body text, i.e. the rest");
  EXPECT_EQ(wrapped[1], "Mr. Smith went");
}

TEST(NiahEssay, BadHaystackFiles) {
  const std::string dir = tmp_dir("bad");
  std::string msg = expect_error([&] { load_essay(dir + "/missing.txt"); });
  EXPECT_NE(msg.find("--haystack"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing.txt"), std::string::npos) << msg;
  write(dir + "/empty.txt", "");
  msg = expect_error([&] { load_essay(dir + "/empty.txt"); });
  EXPECT_NE(msg.find("empty.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;
  write(dir + "/blank.txt", " \n\t\n");
  EXPECT_THROW(load_essay(dir + "/blank.txt"), Error);
  write(dir + "/latin1.txt", "caf\xe9 au lait. Tr\xe8s bien.");
  msg = expect_error([&] { load_essay(dir + "/latin1.txt", "--my-flag"); });
  EXPECT_NE(msg.find("--my-flag"), std::string::npos) << msg;
  EXPECT_NE(msg.find("latin1.txt"), std::string::npos) << msg;
  EXPECT_NE(msg.find("UTF-8"), std::string::npos) << msg;
  msg = expect_error([&] { load_essay(tmp_dir("emptydir")); });
  EXPECT_NE(msg.find("no regular files"), std::string::npos) << msg;
}

TEST(NiahEssay, DirectoryInNameOrderWithoutSymlinks) {
  const std::string dir = tmp_dir("dir");
  write(dir + "/b.txt", "Second file. Ends here.");
  write(dir + "/a.txt", "First file.");
  fs::create_symlink(dir + "/a.txt", dir + "/c-link.txt");
  const EssayText e = load_essay(dir);
  EXPECT_EQ(essay_sentences(e, 0, static_cast<int64_t>(e.words.size())),
            (std::vector<std::string>{"First file.", "Second file.", "Ends here."}));
}

TEST(NiahEssay, DefaultHaystackIsProse) {
  if (!fs::is_directory(kDefaultHaystack)) GTEST_SKIP() << kDefaultHaystack << " not present";
  const EssayText e = load_essay(kDefaultHaystack);
  EXPECT_GT(e.words.size(), 20000u);
  EXPECT_GT(e.sentence_starts.size(), 500u);
}

// ---- samples ------------------------------------------------------------------------------------------

TEST(NiahSamples, SameSeedSamePromptsOtherSeedOthers) {
  for (const auto& task : niah_tasks()) {
    const auto a = make_niah_samples(task, 700, 3, 42, test_essay(), kWords);
    const auto b = make_niah_samples(task, 700, 3, 42, test_essay(), kWords);
    const auto c = make_niah_samples(task, 700, 3, 43, test_essay(), kWords);
    ASSERT_EQ(a.size(), 3u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].prompt, b[i].prompt) << task.name;
      EXPECT_EQ(a[i].expected, b[i].expected) << task.name;
      EXPECT_NE(a[i].prompt, c[i].prompt) << task.name;
    }
    EXPECT_NE(a[0].prompt, a[1].prompt) << task.name;  // trials differ
  }
}

TEST(NiahSamples, EveryNeedleExactlyOnceAndAnswersMatchQueries) {
  for (const auto& task : niah_tasks()) {
    for (int64_t trial = 0; trial < 5; ++trial) {
      const NiahSample s = make_niah_sample(task, 900, 5, trial, test_essay(), kWords);
      const size_t n_needles = static_cast<size_t>(task.num_keys * task.num_values);
      ASSERT_EQ(s.needles.size(), n_needles) << task.name;
      ASSERT_EQ(s.keys.size(), static_cast<size_t>(task.num_keys));
      ASSERT_EQ(s.queries.size(), static_cast<size_t>(task.num_queries));
      ASSERT_EQ(s.expected.size(), static_cast<size_t>(task.num_queries * task.num_values));
      for (const auto& n : s.needles) EXPECT_EQ(count_of(s.prompt, n), 1u) << task.name << ": " << n;
      for (const auto& v : s.expected) {
        EXPECT_EQ(count_of(s.prompt, v), 1u) << task.name << ": " << v;
        // Each expected value sits in a needle of a queried key.
        bool ok = false;
        for (const auto& q : s.queries) ok |= count_of(s.prompt, niah_needle(task.value_kind, q, v)) == 1;
        EXPECT_TRUE(ok) << task.name << ": " << v;
      }
      std::set<std::string> distinct(s.keys.begin(), s.keys.end());
      EXPECT_EQ(distinct.size(), s.keys.size());
      for (const auto& k : s.keys)  // in its needles (and once more in the question and answer prefix if asked)
        EXPECT_EQ(count_of(s.prompt, " " + k + " is: "), static_cast<size_t>(task.num_values)) << task.name;
      const size_t magic = count_of(s.prompt, "One of the special magic");
      EXPECT_EQ(magic, n_needles + (task.haystack == Haystack::needle ? s.haystack_units : 0)) << task.name;
      EXPECT_EQ(
          s.prompt.rfind(niah_answer_prefix(task.value_kind, s.queries, task.num_queries * task.num_values)),
          s.prompt.size() - niah_answer_prefix(task.value_kind, s.queries, task.num_queries * task.num_values).size());
      if (task.haystack == Haystack::noise)
        EXPECT_EQ(count_of(s.prompt, kNoiseUnit), static_cast<size_t>(s.haystack_units));
    }
  }
}

TEST(NiahSamples, EssayDepthsOnRulerGridAndRespected) {
  std::set<int> grid;
  for (int i = 0; i < 40; ++i) grid.insert(static_cast<int>(std::nearbyint(100.0 * i / 39.0)));
  for (const char* name : {"multikey_1", "multivalue", "multiquery", "single_2"}) {
    const NiahTask task = parse_niah_tasks(name)[0];
    for (int64_t trial = 0; trial < 8; ++trial) {
      const NiahSample s = make_niah_sample(task, 1500, 9, trial, test_essay(), kWords);
      std::set<double> distinct(s.depths.begin(), s.depths.end());
      EXPECT_EQ(distinct.size(), s.depths.size()) << name;
      EXPECT_TRUE(std::is_sorted(s.depths.begin(), s.depths.end()));
      const auto sents = essay_sentences(test_essay(), s.essay_start, s.haystack_units);
      for (size_t k = 0; k < s.needles.size(); ++k) {
        EXPECT_EQ(grid.count(static_cast<int>(s.depths[k])), 1u) << s.depths[k];
        EXPECT_EQ(s.positions[k], static_cast<int64_t>(std::floor(sents.size() * s.depths[k] / 100.0)));
        // Count the haystack sentences (each holds one "S<n> tells") before the needle.
        const std::string before = s.prompt.substr(0, s.prompt.find(s.needles[k]));
        int64_t sentences_before = static_cast<int64_t>(count_of(before, " tells "));
        // A cut-off last sentence before the needle also counts.
        if (s.positions[k] == static_cast<int64_t>(sents.size()) && sents.back().find(" tells ") == std::string::npos)
          ++sentences_before;
        EXPECT_EQ(sentences_before, s.positions[k]) << name << " trial " << trial << " needle " << k;
      }
    }
  }
}

TEST(NiahSamples, NoiseAndDistractorDepthsRespected) {
  for (const char* name : {"single_1", "multikey_2"}) {
    const NiahTask task = parse_niah_tasks(name)[0];
    for (int64_t trial = 0; trial < 10; ++trial) {
      const NiahSample s = make_niah_sample(task, 800, 1, trial, test_essay(), kWords);
      ASSERT_EQ(s.needles.size(), 1u);
      EXPECT_EQ(s.positions[0], static_cast<int64_t>(std::floor(s.haystack_units * s.depths[0] / 100.0)));
      const std::string before = s.prompt.substr(0, s.prompt.find(s.needles[0]));
      const std::string unit = task.haystack == Haystack::noise ? kNoiseUnit : "One of the special magic";
      EXPECT_EQ(static_cast<int64_t>(count_of(before, unit)), s.positions[0]) << name;
    }
  }
}

TEST(NiahSamples, SizedToTheLargestFittingHaystack) {
  const NiahOptions opt;
  for (const auto& task : niah_tasks()) {
    for (int64_t length : {300, 1000, 4000}) {
      const NiahSample s = make_niah_sample(task, length, 3, 0, test_essay(), kWords, opt);
      EXPECT_EQ(s.prompt_tokens, word_count(s.prompt));
      EXPECT_LE(s.prompt_tokens + opt.max_new_tokens, length) << task.name;
      const NiahSample same =
          make_niah_sample_with_units(task, length, 3, 0, test_essay(), kWords, opt, s.haystack_units);
      EXPECT_EQ(same.prompt, s.prompt) << task.name;
      const NiahSample more =
          make_niah_sample_with_units(task, length, 3, 0, test_essay(), kWords, opt, s.haystack_units + 1);
      EXPECT_GT(more.prompt_tokens + opt.max_new_tokens, length) << task.name << " " << length;
      // Essay units are words: the prompt fills the budget to within one needle-free word.
      if (task.haystack == Haystack::essay) EXPECT_EQ(s.prompt_tokens + opt.max_new_tokens, length) << task.name;
    }
  }
}

TEST(NiahSamples, SearchHintNeverChangesTheResult) {
  const NiahTask task = parse_niah_tasks("multikey_1")[0];
  const NiahSample base = make_niah_sample(task, 2000, 4, 1, test_essay(), kWords);
  for (int64_t h : {1, 2, 7, 100, 1234, 100000}) {
    int64_t hint = h;
    const NiahSample s = make_niah_sample(task, 2000, 4, 1, test_essay(), kWords, {}, &hint);
    EXPECT_EQ(s.prompt, base.prompt) << h;
    EXPECT_EQ(hint, base.haystack_units);
  }
  // The generation budget counts: a smaller one leaves room for more haystack.
  NiahOptions small;
  small.max_new_tokens = 16;
  EXPECT_GT(make_niah_sample(task, 2000, 4, 1, test_essay(), kWords, small).haystack_units, base.haystack_units);
}

TEST(NiahSamples, ExcerptStartsAtSentenceOrAtBeginning) {
  const NiahTask task = parse_niah_tasks("single_2")[0];
  std::set<int64_t> starts(test_essay().sentence_starts.begin(), test_essay().sentence_starts.end());
  std::set<int64_t> seen;
  for (int64_t t = 0; t < 10; ++t) {
    const NiahSample s = make_niah_sample(task, 600, 2, t, test_essay(), kWords);
    EXPECT_EQ(starts.count(s.essay_start), 1u);
    seen.insert(s.essay_start);
  }
  EXPECT_GT(seen.size(), 3u);
  NiahOptions fixed;
  fixed.random_excerpt = false;
  const NiahSample s = make_niah_sample(task, 600, 2, 0, test_essay(), kWords, fixed);
  EXPECT_EQ(s.essay_start, 0);
  EXPECT_NE(s.prompt.find("\nS0 tells"), std::string::npos);
}

TEST(NiahSamples, TooShortLengthFailsNamingTheFlag) {
  for (const auto& task : niah_tasks()) {
    const std::string msg = expect_error([&] { make_niah_sample(task, 150, 1, 0, test_essay(), kWords); });
    EXPECT_NE(msg.find("--lengths"), std::string::npos) << msg;
    EXPECT_NE(msg.find("150"), std::string::npos) << msg;
  }
  EXPECT_THROW(make_niah_samples(niah_tasks()[0], 1000, 0, 1, test_essay(), kWords), Error);
  // An essay task without an essay is a clear error, not a crash.
  EXPECT_THROW(make_niah_sample(parse_niah_tasks("single_2")[0], 1000, 1, 0, EssayText{}, kWords), Error);
}

// ---- Kamradt grid -----------------------------------------------------------------------------------

TEST(NiahKamradt, InsertionSnapsBackToSentenceEnd) {
  // Ten sentences of ten words: 100 tokens.
  std::vector<std::string> sents;
  for (int i = 0; i < 10; ++i) sents.push_back("w w w w w w w w w end" + std::to_string(i) + ".");
  EXPECT_EQ(kamradt_insertion(sents, 0, kWords), 0);
  EXPECT_EQ(kamradt_insertion(sents, 50, kWords), 5);
  EXPECT_EQ(kamradt_insertion(sents, 59.9, kWords), 5);  // token 59 is mid-sentence: back to the end of the 5th
  EXPECT_EQ(kamradt_insertion(sents, 60, kWords), 6);
  EXPECT_EQ(kamradt_insertion(sents, 99, kWords), 9);
  EXPECT_EQ(kamradt_insertion(sents, 100, kWords), 10);
  EXPECT_EQ(kamradt_insertion({}, 50, kWords), 0);
}

TEST(NiahKamradt, SamplesFitAndSitAfterASentence) {
  for (double depth : {0.0, 10.0, 33.0, 50.0, 77.0, 100.0}) {
    const KamradtSample s = make_kamradt_sample(1200, depth, 5, 0, test_essay(), kWords);
    EXPECT_LE(s.prompt_tokens + 128, 1200);
    EXPECT_EQ(s.prompt_tokens, word_count(s.prompt));
    EXPECT_EQ(count_of(s.prompt, s.needle), 1u);
    EXPECT_EQ(count_of(s.prompt, s.value), 1u);
    EXPECT_NE(s.prompt.find("What is the special magic number for " + s.key + " mentioned in the provided text?"),
              std::string::npos);
    EXPECT_LE(s.actual_depth, depth + 1e-9);
    EXPECT_GT(s.actual_depth, depth - 3.0) << depth;  // a sentence is ~10 of ~1000 words
    const size_t at = s.prompt.find(s.needle);
    const std::string before = s.prompt.substr(0, at);
    if (depth == 0) {
      EXPECT_EQ(before.back(), '\n');  // the needle opens the context
    } else if (depth == 100) {
      EXPECT_EQ(s.prompt.substr(at + s.needle.size(), 9), "\nWhat is ");  // it closes the context
    } else {
      EXPECT_EQ(before.substr(before.size() - 2), ". ") << depth;
      EXPECT_EQ(static_cast<int64_t>(count_of(before, " tells ")), s.sentences_before);
    }
    const KamradtSample again = make_kamradt_sample(1200, depth, 5, 0, test_essay(), kWords);
    EXPECT_EQ(again.prompt, s.prompt);
    EXPECT_NE(make_kamradt_sample(1200, depth, 6, 0, test_essay(), kWords).prompt, s.prompt);
  }
  const std::string msg = expect_error([] { make_kamradt_sample(100, 50, 1, 0, test_essay(), kWords); });
  EXPECT_NE(msg.find("--lengths"), std::string::npos) << msg;
}

// ---- scoring and parsers ----------------------------------------------------------------------------

TEST(NiahScore, StringMatchAll) {
  EXPECT_DOUBLE_EQ(string_match_all("1234567, 7654321", {"1234567", "7654321"}), 100.0);
  EXPECT_DOUBLE_EQ(string_match_all("only 1234567", {"1234567", "7654321"}), 50.0);
  EXPECT_DOUBLE_EQ(string_match_all("only 123456", {"1234567"}), 0.0);
  EXPECT_DOUBLE_EQ(string_match_all("", {"1", "2", "3", "4"}), 0.0);
  EXPECT_DOUBLE_EQ(string_match_all("ABCDEF01-...", {"abcdef01", "x", "y", "z"}), 25.0);
  EXPECT_DOUBLE_EQ(string_match_all("Brave-Otter", {"brave-otter"}), 100.0);
  EXPECT_DOUBLE_EQ(string_match_all("anything", {}), 0.0);
  EXPECT_EQ(niah_postprocess("  \t 123\x01"
                             "456\n "),
            "123\n456");
}

TEST(NiahScore, ListParsers) {
  EXPECT_EQ(parse_int_list("512, 1024", "--lengths"), (std::vector<int64_t>{512, 1024}));
  for (const char* bad : {"", "512,", "abc", "0", "-5", "12x", "1.5"}) {
    const std::string msg = expect_error([&] { parse_int_list(bad, "--lengths"); });
    EXPECT_NE(msg.find("--lengths"), std::string::npos) << msg;
  }
  EXPECT_EQ(parse_depth_list("0,12.5,100", "--depths"), (std::vector<double>{0, 12.5, 100}));
  for (const char* bad : {"101", "-1", "x", "", "nan"}) EXPECT_THROW(parse_depth_list(bad, "--depths"), Error) << bad;
}

}  // namespace
}  // namespace drope::tasks
