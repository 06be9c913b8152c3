#include "fold/rules.h"

#include <fmt/format.h>
#include <re2/re2.h>

#include <nlohmann/json.hpp>

#include "util/decimal.h"
#include "util/error.h"
#include "util/read_file.h"

namespace swavg {

const char* action_name(tensor_action a) {
  switch (a) {
    case tensor_action::average: return "average";
    case tensor_action::latest: return "latest";
    case tensor_action::first: return "first";
    case tensor_action::drop: return "drop";
  }
  return "?";
}

name_pattern::name_pattern(const std::string& pattern, const std::string& option) : text_(pattern) {
  RE2::Options options;
  options.set_log_errors(false);
  auto re = std::make_shared<const RE2>(pattern, options);
  if (!re->ok())
    throw usage_error(
        fmt::format("{}: invalid regular expression '{}': {} (RE2 syntax)", option, pattern, re->error()));
  re_ = std::move(re);
}

bool name_pattern::search(std::string_view name) const {
  return re_ && RE2::PartialMatch(re2::StringPiece(name.data(), name.size()), *re_);
}

name_pattern compile_pattern(const std::string& pattern, const std::string& option) {
  return name_pattern(pattern, option);
}

std::vector<tensor_rule> parse_rules(const std::string& json_text, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw usage_error(fmt::format("{}: not valid JSON: {}", source, e.what()));
  }
  if (doc.is_object() && doc.contains("rules")) doc = doc["rules"];
  if (!doc.is_array()) throw usage_error(source + ": expected a JSON list of rules (or {\"rules\": [...]})");
  std::vector<tensor_rule> rules;
  for (size_t i = 0; i < doc.size(); ++i) {
    const auto& r = doc[i];
    const std::string where = fmt::format("{}: rule {}", source, i + 1);
    if (!r.is_object()) throw usage_error(where + ": expected an object {\"match\", \"action\"}");
    for (const auto& [k, v] : r.items())
      if (k != "match" && k != "action" && k != "decay" && k != "comment")
        throw usage_error(fmt::format("{}: unknown field '{}' (expected match, action, decay, comment)", where, k));
    if (!r.contains("match") || !r["match"].is_string()) throw usage_error(where + ": \"match\" must be a string");
    if (!r.contains("action") || !r["action"].is_string()) throw usage_error(where + ": \"action\" must be a string");
    tensor_rule rule;
    rule.pattern = r["match"].get<std::string>();
    rule.regex = compile_pattern(rule.pattern, where);
    const std::string action = r["action"].get<std::string>();
    if (action == "average")
      rule.action = tensor_action::average;
    else if (action == "latest")
      rule.action = tensor_action::latest;
    else if (action == "first")
      rule.action = tensor_action::first;
    else if (action == "drop")
      rule.action = tensor_action::drop;
    else
      throw usage_error(fmt::format("{}: action must be average, latest, first or drop, got '{}'", where, action));
    if (r.contains("decay")) {
      if (!r["decay"].is_number()) throw usage_error(where + ": \"decay\" must be a number");
      double d = r["decay"].get<double>();
      if (!(d >= 0.0 && d <= 1.0))
        throw usage_error(fmt::format("{}: decay must be in [0, 1], got {}", where, decimal(d)));
      rule.decay = d;
    }
    rules.push_back(std::move(rule));
  }
  return rules;
}

std::vector<tensor_rule> load_rules(const std::string& path) { return parse_rules(read_text_file(path), path); }

const tensor_rule* match_rule(const std::vector<tensor_rule>& rules, const std::string& name) {
  for (const auto& r : rules)
    if (r.regex.search(name)) return &r;
  return nullptr;
}

bool is_standard_buffer_name(const std::string& name) {
  static const char* kNames[] = {"running_mean", "running_var", "num_batches_tracked"};
  const std::string_view whole(name);
  const auto dot = whole.rfind('.');
  const std::string_view last = dot == std::string_view::npos ? whole : whole.substr(dot + 1);
  for (const char* n : kNames)
    if (last == n) return true;
  return false;
}

}  // namespace swavg
