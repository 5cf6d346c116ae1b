// NIAH prompt text: RULER's noise unit, needle sentence, template and answer prefix (constants.py),
// with its singular rewrite, and the Oxford-comma list of query keys.
#include "drope/tasks/niah.h"

#include "drope/core/error.h"

namespace drope::tasks {

// ---- text pieces --------------------------------------------------------------------------------------

const char* const kNoiseUnit =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
namespace {

// RULER's constants.py: the niah template and its answer prefix, concatenated as prepare.py does.
const char* const kTemplate =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to memorize it. "
    "I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all the special magic "
    "{type_needle_v} for {query} mentioned in the provided text?";
const char* const kAnswerPrefix = " The special magic {type_needle_v} for {query} mentioned in the provided text are";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  size_t pos = 0;
  while ((pos = s.find(from, pos)) != std::string::npos) {
    s.replace(pos, from.size(), to);
    pos += to.size();
  }
  return s;
}

// Fills {type_needle_v}, {context} and {query} in one pass over the template, so braces inside the
// substituted text are never re-interpreted (Python's str.format has the same property).
std::string fill_template(std::string tmpl, NeedleKind kind, const std::string& context,
                          const std::vector<std::string>& keys, int64_t values_asked) {
  std::string type = to_string(kind);
  if (values_asked == 1) {
    // RULER's singular rewrite, applied to the template before formatting, in RULER's order.
    tmpl = replace_all(tmpl, "Some", "A");
    tmpl = replace_all(tmpl, "are all", "is");
    tmpl = replace_all(tmpl, "are", "is");
    tmpl = replace_all(tmpl, "answers", "answer");
    type.pop_back();
  }
  const std::string query = join_query_keys(keys);
  std::string out;
  out.reserve(tmpl.size() + context.size() + 64);
  for (size_t i = 0; i < tmpl.size();) {
    if (tmpl[i] == '{') {
      const size_t close = tmpl.find('}', i);
      const std::string name = tmpl.substr(i + 1, close - i - 1);
      if (name == "type_needle_v") out += type;
      else if (name == "context") out += context;
      else if (name == "query") out += query;
      else fail("niah template: unknown placeholder {{{}}}", name);
      i = close + 1;
    } else {
      out += tmpl[i++];
    }
  }
  return out;
}

}  // namespace

std::string niah_needle(NeedleKind value_kind, const std::string& key, const std::string& value) {
  return "One of the special magic " + to_string(value_kind) + " for " + key + " is: " + value + ".";
}

std::string join_query_keys(const std::vector<std::string>& keys) {
  if (keys.empty()) return "";
  if (keys.size() == 1) return keys[0];
  std::string out;
  for (size_t i = 0; i + 1 < keys.size(); ++i) out += keys[i] + ", ";
  return out + "and " + keys.back();
}

std::string niah_prompt(NeedleKind value_kind, const std::string& context, const std::vector<std::string>& query_keys,
                        int64_t values_asked) {
  return fill_template(std::string(kTemplate) + kAnswerPrefix, value_kind, context, query_keys, values_asked);
}

std::string niah_answer_prefix(NeedleKind value_kind, const std::vector<std::string>& query_keys,
                               int64_t values_asked) {
  return fill_template(kAnswerPrefix, value_kind, "", query_keys, values_asked);
}

std::string niah_question(NeedleKind value_kind, const std::vector<std::string>& query_keys, int64_t values_asked) {
  const std::string tmpl(kTemplate);
  const std::string after = tmpl.substr(tmpl.find("{context}") + std::string("{context}").size());
  return fill_template(after + kAnswerPrefix, value_kind, "", query_keys, values_asked);
}

}  // namespace drope::tasks
