/*
 * Per-tensor rules for averaging: an ordered list of {"match": REGEX, "action": ..., "decay": D},
 * first match wins. REGEX is RE2 syntax, searched anywhere in the tensor name (anchor it with ^ and
 * $ to match whole names). RE2 runs in time linear in the name whatever the pattern (no
 * backtracking, so no backreferences or lookaround), which matters because names come from files.
 * Also the standard buffer names used when the model's own parameter/buffer split is not known.
 */
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace re2 {
class RE2;
}

namespace swavg {

// A compiled user pattern (RE2), searched unanchored. Copies share the compiled program.
class name_pattern {
 public:
  name_pattern() = default;
  // Throws usage_error naming `option` (e.g. "--buffer") for a pattern RE2 rejects.
  name_pattern(const std::string& pattern, const std::string& option);
  bool search(std::string_view name) const;
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  std::shared_ptr<const re2::RE2> re_;
};

enum class tensor_action { average, latest, first, drop };
const char* action_name(tensor_action a);

struct tensor_rule {
  std::string pattern;
  name_pattern regex;
  tensor_action action = tensor_action::average;
  std::optional<double> decay;  // EMA only: overrides --decay for matching tensors
};

// `source` names the file in messages. Throws usage_error for malformed rules.
std::vector<tensor_rule> parse_rules(const std::string& json_text, const std::string& source);
std::vector<tensor_rule> load_rules(const std::string& path);
const tensor_rule* match_rule(const std::vector<tensor_rule>& rules, const std::string& name);

// Compiles a user regex, throwing usage_error naming `option` on a bad pattern.
name_pattern compile_pattern(const std::string& pattern, const std::string& option);

// running_mean, running_var, num_batches_tracked (BatchNorm, InstanceNorm with running stats).
bool is_standard_buffer_name(const std::string& name);

}  // namespace swavg
