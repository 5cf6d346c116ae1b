#include "drope/tasks/report.h"

#include <cmath>
#include <filesystem>

#include <fmt/format.h>

#include "drope/core/error.h"
#include "drope/core/files.h"

namespace drope::tasks {

void Table::add_row(std::vector<std::string> row) {
  if (row.size() != columns.size())
    fail("table '{}': row has {} cells, expected {} (one per column)", title, row.size(), columns.size());
  rows.push_back(std::move(row));
}

namespace {
std::string csv_cell(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}
std::string md_cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|') out += "\\|";
    else if (c == '\n') out += ' ';
    else out += c;
  }
  return out;
}
}  // namespace

std::string to_csv(const Table& t) {
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i) out += (i ? "," : "") + csv_cell(cells[i]);
    out += "\n";
  };
  line(t.columns);
  for (const auto& r : t.rows) line(r);
  return out;
}

std::string to_markdown(const Table& t) {
  std::string out;
  if (!t.title.empty()) out += "### " + t.title + "\n\n";
  auto line = [&](const std::vector<std::string>& cells) {
    out += "|";
    for (const auto& c : cells) out += " " + md_cell(c) + " |";
    out += "\n";
  };
  line(t.columns);
  out += "|";
  for (size_t i = 0; i < t.columns.size(); ++i) out += i ? " ---: |" : " --- |";
  out += "\n";
  for (const auto& r : t.rows) line(r);
  return out;
}

std::vector<std::string> write_report(const std::string& prefix, const nlohmann::json& json, const Table& table) {
  auto parent = std::filesystem::path(prefix).parent_path();
  if (!parent.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(parent, ec);
    if (ec) fail("cannot create output directory {}: {}", parent.string(), ec.message());
  }
  std::vector<std::string> paths = {prefix + ".json", prefix + ".csv", prefix + ".md"};
  write_file_atomic(paths[0], json.dump(2) + "\n");
  write_file_atomic(paths[1], to_csv(table));
  write_file_atomic(paths[2], to_markdown(table));
  return paths;
}

std::string fixed(double v, int decimals) {
  if (std::isnan(v)) return "nan";
  return fmt::format("{:.{}f}", v, decimals);
}

}  // namespace drope::tasks
