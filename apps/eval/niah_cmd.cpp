// `drope-eval niah` (placeholder until the NIAH command lands).
#include "eval/common.h"

namespace drope::evalcli {
void add_niah_commands(CLI::App&, int&) {}
}  // namespace drope::evalcli
