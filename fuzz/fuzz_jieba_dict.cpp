// The jieba data that LongBench's Chinese metrics segment with: dict.txt ("word frequency [tag]" lines) and the
// HMM tables finalseg/prob_{start,trans,emit}.py (Python literals). The first input byte picks the file that
// the rest of the input replaces; the others are small valid tables. A loaded segmenter must then cut text.
#include <filesystem>

#include "drope/tasks/jieba.h"
#include "fuzz_util.h"

namespace fuzz_jieba_dict {
struct File {
  const char* name;
  const char* valid;
};
const File kFiles[] = {
    {"dict.txt", "研究 7\n研究生 3\n生命 5\n的 20\n起源 4\n"},
    {"finalseg/prob_start.py", "P={'B': -0.5, 'E': -3.14e+100, 'M': -3.14e+100, 'S': -1.0}\n"},
    {"finalseg/prob_trans.py",
     "P={'B': {'E': -0.1, 'M': -5.0}, 'E': {'B': -0.5, 'S': -1.0}, 'M': {'E': -0.3, 'M': -1.2},"
     " 'S': {'B': -0.7, 'S': -0.6}}\n"},
    {"finalseg/prob_emit.py", "P={'B': {'\\u4e00': -1.0}, 'E': {'\\u4e8c': -1.0}, 'M': {}, 'S': {'\\u4e09': -0.1}}\n"},
};
}  // namespace fuzz_jieba_dict

DROPE_FUZZ_TARGET(jieba_dict)(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  namespace fj = fuzz_jieba_dict;
  const size_t pick = data[0] % (sizeof fj::kFiles / sizeof *fj::kFiles);
  const std::string dir = drope::fuzz::scratch_dir() + "/jieba";
  std::filesystem::create_directories(dir + "/finalseg");
  std::string path;
  for (size_t i = 0; i < sizeof fj::kFiles / sizeof *fj::kFiles; ++i) {
    const std::string name = std::string("jieba/") + fj::kFiles[i].name;
    const std::string v = fj::kFiles[i].valid;
    if (i == pick) path = drope::fuzz::input_file(name, data + 1, size - 1);
    else drope::fuzz::input_file(name, reinterpret_cast<const uint8_t*>(v.data()), v.size());
  }
  drope::fuzz::expect_clean(path, [&] {
    const drope::tasks::Jieba j(dir);
    j.cut("研究生命的起源，一二三 abc 123 研究生。");
  });
  return 0;
}
