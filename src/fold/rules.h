/*
 * Per-tensor rules for averaging: an ordered list of {"match": REGEX, "action": ..., "decay": D},
 * first match wins. REGEX is ECMAScript syntax, searched anywhere in the tensor name (anchor it with
 * ^ and $ to match whole names). Also the standard buffer names used when the model's own
 * parameter/buffer split is not known.
 */
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace swavg {

enum class tensor_action { average, latest, first, drop };
const char* action_name(tensor_action a);

struct tensor_rule {
  std::string pattern;
  std::regex regex;
  tensor_action action = tensor_action::average;
  std::optional<double> decay;  // EMA only: overrides --decay for matching tensors
};

// `source` names the file in messages. Throws usage_error for malformed rules.
std::vector<tensor_rule> parse_rules(const std::string& json_text, const std::string& source);
std::vector<tensor_rule> load_rules(const std::string& path);
const tensor_rule* match_rule(const std::vector<tensor_rule>& rules, const std::string& name);

// Compiles a user regex, throwing usage_error naming `option` on a bad pattern.
std::regex compile_pattern(const std::string& pattern, const std::string& option);

// running_mean, running_var, num_batches_tracked (BatchNorm, InstanceNorm with running stats).
bool is_standard_buffer_name(const std::string& name);

}  // namespace swavg
