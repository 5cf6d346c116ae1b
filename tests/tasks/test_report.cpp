// Result tables: CSV quoting, Markdown escaping, atomic JSON/CSV/MD triple.
#include <filesystem>

#include <gtest/gtest.h>

#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/tasks/report.h"

namespace drope::tasks {

TEST(Report, CsvQuotesAndMarkdownEscapes) {
  Table t;
  t.title = "demo";
  t.columns = {"method", "score"};
  t.add_row({"a,b", "1.00"});
  t.add_row({"say \"hi\"", "x|y"});
  EXPECT_EQ(to_csv(t), "method,score\n\"a,b\",1.00\n\"say \"\"hi\"\"\",x|y\n");
  EXPECT_EQ(to_markdown(t), "### demo\n\n| method | score |\n| --- | ---: |\n| a,b | 1.00 |\n| say \"hi\" | x\\|y |\n");
  EXPECT_THROW(t.add_row({"only one"}), drope::Error);
}

TEST(Report, WritesThreeFilesAtomically) {
  auto dir = std::filesystem::path(DROPE_TEST_TMP) / "report";
  std::filesystem::remove_all(dir);
  Table t;
  t.columns = {"x"};
  t.add_row({fixed(1.005, 1)});
  auto paths = write_report((dir / "sub" / "res").string(), {{"k", 1}}, t);
  ASSERT_EQ(paths.size(), 3u);
  EXPECT_EQ(read_file(paths[0]), "{\n  \"k\": 1\n}\n");
  EXPECT_EQ(read_file(paths[1]), "x\n1.0\n");
  for (auto& e : std::filesystem::directory_iterator(dir / "sub"))
    EXPECT_EQ(e.path().filename().string().find(".drope-tmp"), std::string::npos) << e.path();
  EXPECT_EQ(fixed(std::nan("")), "nan");
}

}  // namespace drope::tasks
