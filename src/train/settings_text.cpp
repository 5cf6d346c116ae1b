// The settings table as text: drope-train --help, `drope-train settings` and the tables of docs/training.md.
#include <fmt/format.h>

#include <utility>

#include "drope/core/environment.h"
#include "drope/core/error.h"
#include "drope/core/strings.h"
#include "drope/train/settings.h"

namespace drope::train {

namespace {

// The resume rules in the order the docs list them, with what each means.
const std::vector<std::pair<OnResume, std::string>>& rule_whys() {
  static const std::vector<std::pair<OnResume, std::string>> whys = {
      {OnResume::kReports, "how long the run goes on and what it reports"},
      {OnResume::kSameStep, "how a step is computed: the same step up to float rounding (the world size may change "
                            "too)"},
      {OnResume::kSameLr,
       "only while the learning rate of every step already taken stays the same (extend a constant schedule, or "
       "the stable part of a WSD one; a cosine schedule stretched by a longer `train.steps` is refused: keep "
       "`schedule.steps`)"},
      {OnResume::kDropAhead, "only while the drop lies ahead of the checkpoint under both values (seeding a DroPE "
                             "run from a RoPE checkpoint)"},
      {OnResume::kSameFile, "only another spelling of the same file or directory"},
  };
  return whys;
}

std::string rule_label(OnResume r) {
  switch (r) {
    case OnResume::kReports: return "yes";
    case OnResume::kSameStep: return "yes (same step)";
    case OnResume::kSameLr: return "if past learning rates stay";
    case OnResume::kDropAhead: return "if the drop lies ahead";
    case OnResume::kSameFile: return "same file only";
    case OnResume::kFixed: break;
  }
  return "no";
}

// "1000", "0.0003", "[0.9, 0.95]", "" for an empty string: the default as a reader would write it.
std::string shown_default(const Setting& s) {
  static const RunConfig defaults;
  if (!s.default_note.empty()) return s.default_note;
  if (s.omitted && s.omitted(defaults)) return "";
  const YAML::Node n = YAML::Load(setting_value(s, defaults));
  const bool numbers = s.type.find("number") != std::string::npos;
  const auto shown = [&](const YAML::Node& x) { return numbers ? fmt::format("{:g}", x.as<double>()) : x.Scalar(); };
  if (!n.IsSequence()) return shown(n);
  std::string out;
  for (const auto& x : n) out += (out.empty() ? "" : ", ") + shown(x);
  return "[" + out + "]";
}

std::string allowed(const Setting& s) {
  if (!s.choices.empty()) return s.choices;
  if (!s.range) return "";
  const bool each = s.type == "lengths" || s.type.front() == '[';
  return (each ? "each " : "") + range_text(*s.range);
}

std::string code(const std::string& t) { return t.empty() ? "" : "`" + t + "`"; }

std::string train_settings_table() {
  std::string out =
      "| key | type | default | allowed | `--resume` may change it | what it sets |\n|---|---|---|---|---|---|\n";
  for (const auto& s : run_settings())
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", s.key, s.type,
                       s.default_note.empty() ? code(shown_default(s)) : s.default_note, markdown_cell(allowed(s)),
                       rule_label(s.resume), markdown_cell(s.doc));
  return out;
}

std::string keys_with(OnResume r) {
  std::string out;
  for (const auto& s : run_settings())
    if (s.resume == r) out += (out.empty() ? "`" : ", `") + s.key + "`";
  return out;
}

std::string resume_settings_table() {
  std::string out = "| may change | why |\n|---|---|\n";
  for (const auto& [rule, why] : rule_whys()) out += fmt::format("| {} | {} |\n", keys_with(rule), why);
  out += fmt::format("\nRefused: the whole `model:` section, {}.\n", keys_with(OnResume::kFixed));
  return out;
}

std::string section(const std::string& name, const std::string& body) {
  return fmt::format("<!-- {0}:begin -->\n{1}<!-- {0}:end -->", name, body);
}

const std::vector<std::pair<std::string, std::string (*)()>>& doc_sections() {
  static const std::vector<std::pair<std::string, std::string (*)()>> s = {{"train-settings", &train_settings_table},
                                                                           {"resume-settings", &resume_settings_table},
                                                                           {"environment", &env::markdown_table}};
  return s;
}

// Appends `words` to `out`, breaking lines at `width` with `indent` spaces after each break.
void wrap(std::string& out, const std::vector<std::string>& words, size_t width, size_t indent) {
  size_t col = out.size() - (out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
  for (size_t i = 0; i < words.size(); ++i) {
    const std::string w = words[i] + (i + 1 < words.size() ? "," : "");
    if (col + 1 + w.size() > width && col > indent) {
      out += "\n" + std::string(indent, ' ');
      col = indent;
    } else if (i > 0) {
      out += " ";
      ++col;
    }
    out += w;
    col += w.size();
  }
}

}  // namespace

std::string settings_help(size_t width) {
  std::string out = "Settings (the run config's keys, also as --set KEY=VALUE; `drope-train settings` describes "
                    "each):\n";
  for (const auto& sec : setting_sections()) {
    out += fmt::format("  {:<10}", sec + ":");
    std::vector<std::string> names;
    for (const auto& s : run_settings())
      if (s.section() == sec) names.push_back(s.name());
    if (names.empty()) names.push_back("the model section of docs/formats.md");
    wrap(out, names, width, 12);
    out += "\n";
  }
  return out;
}

std::string settings_text() {
  std::string out;
  for (const auto& s : run_settings()) {
    const std::string def = shown_default(s), ok = allowed(s);
    out += fmt::format("{}  ({}{}{}; --resume: {})\n    {}\n", s.key, s.type, def.empty() ? "" : ", default " + def,
                       ok.empty() ? "" : ", " + ok, rule_label(s.resume), s.doc);
  }
  return out;
}

std::string settings_markdown() {
  std::string out;
  for (const auto& [name, body] : doc_sections()) out += section(name, body()) + "\n";
  return out;
}

std::string with_settings_sections(const std::string& doc_text, const std::string& file) {
  std::string text = doc_text;
  for (const auto& [name, body] : doc_sections()) {
    const std::string begin = fmt::format("<!-- {}:begin -->", name), end = fmt::format("<!-- {}:end -->", name);
    const size_t b = text.find(begin), e = text.find(end);
    if (b == std::string::npos || e == std::string::npos || text.find(begin, b + 1) != std::string::npos ||
        text.find(end, e + 1) != std::string::npos || e < b)
      fail("{}: needs one {} before one {} (the generated settings table)", file, begin, end);
    text = text.substr(0, b) + section(name, body()) + text.substr(e + end.size());
  }
  return text;
}

}  // namespace drope::train
