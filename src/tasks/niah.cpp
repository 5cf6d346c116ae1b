// Needle-in-a-haystack prompts and scoring (docs/design.md#needle-in-a-haystack). The task facts (needle
// sentence, template, answer prefix, singular rewrite, presets, depth grid, string_match_all) follow RULER's
// scripts/data/synthetic/niah.py, constants.py and synthetic.yaml; the code is our own.
// This file: the task presets and their names; the prompt text is in niah_prompt.cpp, seeds and draws in
// niah_random.cpp, the essay haystack in niah_essay.cpp, RULER samples in niah_samples.cpp, the size
// search in niah_search.cpp, the Kamradt grid in niah_grid.cpp, scoring in niah_score.cpp and the CLI
// list parsers in niah_parse.cpp.
#include "drope/tasks/niah.h"

#include <algorithm>

#include "drope/core/error.h"
#include "niah_internal.h"

namespace drope::tasks {

using niah_detail::split_list;

// ---- tasks ------------------------------------------------------------------------------------------

const std::vector<NiahTask>& niah_tasks() {
  // RULER's synthetic.yaml. multikey_2/3 keep num_needle_k = 1 as RULER does: their haystack is made of
  // distractor needles, which supply the other keys. multiquery has 4 keys because RULER raises
  // num_needle_k to num_needle_q.
  static const std::vector<NiahTask> tasks = {
      {"single_1", Haystack::noise, NeedleKind::words, NeedleKind::numbers, 1, 1, 1},
      {"single_2", Haystack::essay, NeedleKind::words, NeedleKind::numbers, 1, 1, 1},
      {"single_3", Haystack::essay, NeedleKind::words, NeedleKind::uuids, 1, 1, 1},
      {"multikey_1", Haystack::essay, NeedleKind::words, NeedleKind::numbers, 4, 1, 1},
      {"multikey_2", Haystack::needle, NeedleKind::words, NeedleKind::numbers, 1, 1, 1},
      {"multikey_3", Haystack::needle, NeedleKind::uuids, NeedleKind::uuids, 1, 1, 1},
      {"multivalue", Haystack::essay, NeedleKind::words, NeedleKind::numbers, 1, 4, 1},
      {"multiquery", Haystack::essay, NeedleKind::words, NeedleKind::numbers, 4, 1, 4},
  };
  return tasks;
}

std::vector<NiahTask> parse_niah_tasks(const std::string& list, const std::string& flag) {
  const auto& all = niah_tasks();
  std::string known = "all, paper";
  for (const auto& t : all) known += ", " + t.name;
  std::vector<NiahTask> out;
  auto add = [&](const std::string& name) {
    for (const auto& t : out)
      if (t.name == name) return;
    for (const auto& t : all)
      if (t.name == name) out.push_back(t);
  };
  for (std::string name : split_list(list)) {
    if (name.empty()) fail("{}: empty task name in '{}' (known: {})", flag, list, known);
    if (name.rfind("niah_", 0) == 0) name = name.substr(5);
    if (name == "all") {
      for (const auto& t : all) add(t.name);
    } else if (name == "paper") {
      for (const char* n : {"multiquery", "multikey_1", "multivalue"}) add(n);
    } else if (std::any_of(all.begin(), all.end(), [&](const NiahTask& t) { return t.name == name; })) {
      add(name);
    } else {
      fail("{}: unknown NIAH task '{}' (known: {})", flag, name, known);
    }
  }
  return out;
}

std::string to_string(Haystack h) {
  switch (h) {
    case Haystack::noise: return "noise";
    case Haystack::essay: return "essay";
    case Haystack::needle: return "needle";
  }
  return "?";
}

std::string to_string(NeedleKind k) {
  switch (k) {
    case NeedleKind::words: return "words";
    case NeedleKind::numbers: return "numbers";
    case NeedleKind::uuids: return "uuids";
  }
  return "?";
}

}  // namespace drope::tasks
