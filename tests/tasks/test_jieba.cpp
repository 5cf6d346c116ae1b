// The jieba re-implementation against segmentations that jieba 0.42.1 (Python) produced for the same
// text with the same dictionary (Debian's python3-jieba), plus dictionary handling and errors.
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/tasks/jieba.h"

namespace drope::tasks {
namespace {

namespace fs = std::filesystem;

using Words = std::vector<std::string>;

// Each expectation is jieba.lcut(text) from the Python package.
TEST(Jieba, MatchesPythonJiebaOnTrickyText) {
  const Jieba& j = Jieba::shared();
  const std::vector<std::pair<std::string, Words>> cases = {
      {"我来到北京清华大学", {"我", "来到", "北京", "清华大学"}},
      {"他来到了网易杭研大厦", {"他", "来到", "了", "网易", "杭研", "大厦"}},  // 杭研: HMM new word
      {"小明硕士毕业于中国科学院计算所，后在日本京都大学深造",
       {"小明", "硕士", "毕业", "于", "中国科学院", "计算所", "，", "后", "在", "日本京都大学", "深造"}},
      {"这是一个伸手不见五指的黑夜。我叫孙悟空，我爱北京，我爱Python和C++。",
       {"这是", "一个", "伸手不见五指", "的", "黑夜", "。", "我",     "叫", "孙悟空", "，",
        "我",   "爱",   "北京",         "，", "我",   "爱", "Python", "和", "C++",    "。"}},
      {"iPhone 15 Pro售价8999元，涨幅3.5%！",
       {"iPhone", " ", "15", " ", "Pro", "售价", "8999", "元", "，", "涨幅", "3.5%", "！"}},
      {"AT&T和B超是c#里的3.14%吗 hello-world foo_bar\r\nnext\tline\u3000全角 空格",
       {"AT&T", "和",  "B超", "是",  "c#",   "里",   "的", "3.14%", "吗",     " ",    "hello", "-",   "world",
        " ",    "foo", "_",   "bar", "\r\n", "next", "\t", "line",  "\u3000", "全角", " ",     "空格"}},
      {"", {}},
      {"   ", {" ", " ", " "}},
      {"ＡＢＣ１２３全角字母", {"Ａ", "Ｂ", "Ｃ", "１", "２", "３", "全角字", "母"}},
      {"结婚的和尚未结婚的", {"结婚", "的", "和", "尚未", "结婚", "的"}},
      {"工信处女干事每月经过下属科室都要亲口交代24口交换机等技术性器件的安装工作",
       {"工信处", "女干事", "每月", "经过", "下属", "科室", "都", "要", "亲口", "交代", "24", "口", "交换机", "等",
        "技术性", "器件", "的", "安装", "工作"}},
      {"emoji 😀 混合 🇨🇳 文本", {"emoji", " ", "😀", " ", "混合", " ", "🇨", "🇳", " ", "文本"}},
      {"李小福是创新办主任也是云计算方面的专家",
       {"李小福", "是", "创新", "办", "主任", "也", "是", "云", "计算", "方面", "的", "专家"}},
      {"2023年10月1日，国庆节；《三体》作者刘慈欣。",
       {"2023", "年", "10", "月", "1", "日", "，", "国庆节", "；", "《", "三体", "》", "作者", "刘慈欣", "。"}},
      {"abc.def 1.2.3 v2.0版本", {"abc", ".", "def", " ", "1.2", ".", "3", " ", "v2.0", "版本"}},
  };
  for (const auto& [text, expected] : cases) EXPECT_EQ(j.cut(text), expected) << text;
}

TEST(Jieba, Utf8AndWhitespaceHelpers) {
  EXPECT_EQ(utf8_to_u32("a\xC3\xA9\xF0\x9F\x98\x80"), std::u32string(U"a\u00e9\U0001F600"));
  EXPECT_EQ(utf8_to_u32("\xC0\xAF"
                        "x\xED\xA0\x80"),
            std::u32string(U"\uFFFD\uFFFDx\uFFFD\uFFFD\uFFFD"));
  EXPECT_EQ(u32_to_utf8(U"a\u00e9\u4e2d\U0001F600"), "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80");
  for (char32_t c : {U' ', U'\t', U'\x1c', U'\x85', U'\xa0', U'\u2003', U'\u3000', U'\u2028'})
    EXPECT_TRUE(py_isspace(c));
  for (char32_t c : {U'x', U'\u200b', U'\ufeff', U'_'}) EXPECT_FALSE(py_isspace(c));
}

fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::path(DROPE_TEST_TMP) / name;
  fs::remove_all(dir);
  fs::create_directories(dir / "finalseg");
  return dir;
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// The message of the drope::Error that loading `dir` throws ("<no error>" when it loads).
std::string load_error(const std::string& dir) {
  try {
    Jieba j(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

void copy_hmm(const fs::path& dir) {
  for (const char* f : {"prob_start.py", "prob_trans.py", "prob_emit.py"})
    fs::copy_file(fs::path(Jieba::default_dir()) / "finalseg" / f, dir / "finalseg" / f);
}

// A small dictionary: duplicate words add to the total and the last frequency wins (gen_pfdict);
// prefixes are present with frequency 0. Expected cuts from jieba.Tokenizer(dictionary=...).
TEST(Jieba, CustomDictionaryFollowsGenPfdict) {
  fs::path dir = fresh_dir("jieba-custom");
  write(dir / "dict.txt", "研究 10 n\n研究生 5 n\n生命 10 n\n命 3\n起源 8 v\n的 20\n研究 7\n");
  copy_hmm(dir);
  Jieba j(dir.string());
  EXPECT_EQ(j.total(), 63);
  EXPECT_EQ(j.frequency(U"研究"), 7);
  EXPECT_EQ(j.frequency(U"研"), 0);
  EXPECT_EQ(j.frequency(U"究"), -1);
  EXPECT_EQ(j.cut("研究生命的起源"), (Words{"研究", "生命", "的", "起源"}));
  EXPECT_EQ(j.cut("研究生命起源的研究"), (Words{"研究", "生命", "起源", "的", "研究"}));
  EXPECT_EQ(j.cut("生命的研究生"), (Words{"生命", "的", "研究生"}));
}

TEST(Jieba, HmmTablesAreParsedAsPythonLiterals) {
  // Escapes, comments, a trailing comma and u-prefixed strings are all Python; with a one-character
  // dictionary every run of unknown characters goes through this HMM, whose emissions force B E.
  fs::path dir = fresh_dir("jieba-literals");
  write(dir / "dict.txt", "的 1\n");
  write(dir / "finalseg" / "prob_start.py", "# start\nP={'B': -0.5, 'E': -3.14e+100, 'M': -3.14e+100, 'S': -1.0}\n");
  write(dir / "finalseg" / "prob_trans.py",
        "P = {'B': {'E': -0.1, 'M': -5.0},\n 'E': {'B': -0.5, 'S': -1.0},\n 'M': {'E': -0.3, 'M': -1.2},\n"
        " 'S': {'B': -0.7, 'S': -0.6},}\n");
  write(dir / "finalseg" / "prob_emit.py",
        "from __future__ import unicode_literals\nP={'B': {'\\u4e00': -1.0, u'二': -9.0},\n"
        " 'E': {'\\u4e8c': -1.0}, 'M': {}, 'S': {\"\\u4e09\": -0.1}}\n");
  Jieba j(dir.string());
  EXPECT_EQ(j.cut("一二三一二"), (Words{"一二", "三", "一二"}));
}

TEST(Jieba, MissingOrBrokenDataFailsClearly) {
  std::string msg = load_error("/nonexistent/jieba");
  for (const char* needle : {"/nonexistent/jieba/dict.txt", "python3-jieba", "DROPE_JIEBA_DIR"})
    EXPECT_NE(msg.find(needle), std::string::npos) << msg;
  fs::path dir = fresh_dir("jieba-broken");
  write(dir / "dict.txt", "好 3\n坏\n");
  copy_hmm(dir);
  msg = load_error(dir.string());
  EXPECT_NE(msg.find("dict.txt:2: invalid dictionary entry"), std::string::npos) << msg;
  write(dir / "dict.txt", "好 3\n");
  write(dir / "finalseg" / "prob_trans.py", "P={'B': {'E': -0.5,\n 'X': -1.0}}\n");
  msg = load_error(dir.string());
  EXPECT_NE(msg.find("prob_trans.py: unknown HMM state 'X'"), std::string::npos) << msg;
  write(dir / "finalseg" / "prob_trans.py", "P={'B': {'E': -0.5\n 'M': -1.0}}\n");
  msg = load_error(dir.string());
  EXPECT_NE(msg.find("prob_trans.py:2: expected ',' or '}'"), std::string::npos) << msg;
  // Deep nesting is refused at a fixed depth, not followed until the stack runs out.
  std::string deep = "P=";
  for (int i = 0; i < 200000; ++i) deep += "{'B':";
  write(dir / "finalseg" / "prob_trans.py", deep + "\n");
  msg = load_error(dir.string());
  EXPECT_NE(msg.find("prob_trans.py:1: dicts nested more than 2 deep"), std::string::npos) << msg;
  write(dir / "finalseg" / "prob_trans.py", "P={'B': {'E': {}}}\n");  // a dict where a number belongs
  msg = load_error(dir.string());
  EXPECT_NE(msg.find("prob_trans.py:1: dicts nested more than 2 deep"), std::string::npos) << msg;
  EXPECT_EQ(load_error(Jieba::default_dir()), "<no error>");
}

TEST(Jieba, DefaultDirComesFromTheEnvironment) {
  const char* old = std::getenv("DROPE_JIEBA_DIR");
  std::string saved = old ? old : "";
  setenv("DROPE_JIEBA_DIR", "/some/where", 1);
  EXPECT_EQ(Jieba::default_dir(), "/some/where");
  unsetenv("DROPE_JIEBA_DIR");
  EXPECT_EQ(Jieba::default_dir(), "/usr/lib/python3/dist-packages/jieba");
  if (old) setenv("DROPE_JIEBA_DIR", saved.c_str(), 1);
}

}  // namespace
}  // namespace drope::tasks
