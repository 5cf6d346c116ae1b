// Flags of `drope-train settings` (train/settings.h: the run config's keys, declared once).
#include <fmt/format.h>

#include "app_common.h"
#include "drope/core/error.h"
#include "drope/core/files.h"
#include "drope/core/log.h"
#include "drope/train/settings.h"
#include "train/commands.h"

namespace drope::traincli {

void add_settings_command(CLI::App& cli, SettingsFlags& s) {
  s.cmd = cli.add_subcommand("settings", "Every key of a run config: its type, default, allowed values, what "
                                         "--resume may do with it and what it sets; a config file named "
                                         "settings: ./settings");
  s.cmd->add_flag("--markdown", s.markdown, "Print the generated tables of docs/training.md, with their markers");
  s.cmd->add_option("--doc", s.doc, "Rewrite the generated tables in FILE (docs/training.md) in place");
  s.cmd->fallthrough();  // refused training flags after the command
}

int run_settings_command(const SettingsFlags& s, const TrainFlags& f) {
  return app::run([&] {
    if (!f.config.empty() || !f.sets.empty() || f.resume || f.print_config)
      fail("drope-train settings takes --markdown and --doc only (not a config, --set, --resume or --print-config)");
    if (!s.doc.empty()) {
      write_file_atomic(s.doc, train::with_settings_sections(read_file(s.doc), s.doc));
      logging::info("wrote {}", s.doc);
      return 0;
    }
    fmt::print("{}", s.markdown ? train::settings_markdown() : train::settings_text());
    return 0;
  });
}

}  // namespace drope::traincli
