#include "cli/command_line.h"

#include <CLI/CLI.hpp>

namespace swavg {
namespace {

// "{a,b,c}", the description add_enum_option gives its check, as the names a, b, c.
std::vector<std::string> choices_in(const std::string& description) {
  std::vector<std::string> names;
  if (description.size() < 3 || description.front() != '{' || description.back() != '}') return names;
  const std::string list = description.substr(1, description.size() - 2);
  if (list.find_first_of("{} ") != std::string::npos) return names;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (comma == start) return {};
    names.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return names;
}

std::vector<std::string> choices_of(CLI::Option* opt) {
  for (int i = 0;; ++i) {
    CLI::Validator* check = nullptr;
    try {
      check = opt->get_validator(i);
    } catch (const CLI::OptionNotFound&) {
      return {};
    }
    auto names = choices_in(check->get_description());
    if (!names.empty()) return names;
  }
}

bool is_number(const std::string& type_name) {
  for (const char* t : {"INT", "UINT", "FLOAT"}) {
    const std::string prefix = t;
    if (type_name == prefix || type_name.rfind(prefix + ":", 0) == 0) return true;
  }
  return false;
}

option_spec spec_of(CLI::Option* opt) {
  option_spec s;
  for (const auto& n : opt->get_snames()) s.names.push_back("-" + n);
  for (const auto& n : opt->get_lnames()) s.names.push_back("--" + n);
  if (s.names.empty()) s.positional = opt->get_name(true, false);
  s.description = opt->get_description();
  s.group = opt->get_group();
  s.default_value = opt->get_default_str();
  s.required = opt->get_required();
  s.repeatable = opt->get_expected_max() > 1 || opt->get_items_expected_max() > 1;
  if (opt->get_expected_max() == 0) return s;  // a flag (CLI11 2.1 gives flags a type size of 1)
  s.choices = choices_of(opt);
  const std::string type = opt->get_type_name();
  if (!s.choices.empty()) {
    s.kind = value_kind::choice;
    s.value_text = "{" + CLI::detail::join(s.choices, ",") + "}";
  } else {
    s.kind = is_number(type) ? value_kind::number : value_kind::path;
    s.value_text = !opt->get_option_text().empty() ? opt->get_option_text() : type;
  }
  return s;
}

}  // namespace

std::vector<option_spec> options_of(CLI::App& app) {
  std::vector<option_spec> specs;
  for (CLI::Option* opt : app.get_options())
    if (opt->get_positional() && !opt->nonpositional() && !opt->get_group().empty()) specs.push_back(spec_of(opt));
  for (const std::string& group : app.get_groups()) {
    if (group.empty()) continue;
    for (CLI::Option* opt : app.get_options())
      if (opt->nonpositional() && opt->get_group() == group) specs.push_back(spec_of(opt));
  }
  return specs;
}

std::vector<command_spec> commands_of(CLI::App& root) {
  std::vector<command_spec> commands;
  commands.push_back({"", root.get_description(), root.get_footer(), options_of(root)});
  if (root.get_fallthrough()) {
    for (auto& o : commands.back().options) {
      bool own = false;  // --help and --version are each subcommand's own, or the program's alone
      for (const CLI::Option* not_passed : {root.get_help_ptr(), root.get_version_ptr()})
        if (not_passed != nullptr && !o.names.empty() && not_passed->check_name(o.names.back())) own = true;
      o.global = !own && o.positional.empty();
    }
  }
  for (CLI::App* sub : root.get_subcommands([](CLI::App* a) { return !a->get_group().empty() && !a->get_disabled(); }))
    commands.push_back({sub->get_name(), sub->get_description(), sub->get_footer(), options_of(*sub)});
  return commands;
}

}  // namespace swavg
