// `drope-eval longbench` (placeholder until the LongBench commands land).
#include "eval/common.h"

namespace drope::evalcli {
void add_longbench_commands(CLI::App&, int&) {}
}  // namespace drope::evalcli
