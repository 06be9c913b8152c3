#include "cli/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include "util/decimal.h"
#include "util/error.h"
#include "util/listing.h"

namespace swavg {
namespace {

// `--shard "$SHARD"` with SHARD unset must not read as an absent --shard: an empty value is a usage
// error for every option and argument, before the option's own check.
CLI::Validator non_empty_value() {
  return CLI::Validator(
      [](std::string& value) {
        return value.empty() ? std::string("expected a value, got an empty string") : std::string();
      },
      "");
}

// The subcommand being parsed when CLI11 threw (the deepest one named), or the root.
CLI::App* subcommand_of(CLI::App& root) {
  CLI::App* at = &root;
  while (!at->get_subcommands().empty()) at = at->get_subcommands().front();
  return at;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// " (did you mean 'x'?)" for the name of `names` within two edits of `given` (a typo), else "".
std::string did_you_mean(const std::string& given, const std::vector<std::string>& names) {
  std::string best;
  size_t best_distance = 3;
  for (const auto& name : names) {
    const size_t d = edit_distance(given, name);
    if (d < best_distance) {
      best_distance = d;
      best = name;
    }
  }
  return best.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", best);
}

std::vector<std::string> subcommand_names(CLI::App& root) {
  std::vector<std::string> names;
  for (const CLI::App* sub : root.get_subcommands([](CLI::App* s) { return !s->get_group().empty(); }))
    names.push_back(sub->get_name());  // not the hidden ones (help-man)
  return names;
}

// The option names `at` takes (its own and, through fallthrough, its parents'), dashes included.
std::vector<std::string> option_names(const CLI::App* at) {
  std::vector<std::string> names;
  for (; at != nullptr; at = at->get_parent())
    for (const CLI::Option* opt : at->get_options()) {
      for (const auto& n : opt->get_lnames()) names.push_back("--" + n);
      for (const auto& n : opt->get_snames()) names.push_back("-" + n);
    }
  return names;
}

std::string after_colon(const std::string& text) {
  const size_t colon = text.find(": ");
  return colon == std::string::npos ? text : text.substr(colon + 2);
}

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  for (size_t start = 0; start < text.size();) {
    const size_t stop = std::min(text.find(' ', start), text.size());
    if (stop > start) words.push_back(text.substr(start, stop - start));
    start = stop + 1;
  }
  return words;
}

// The arguments nothing took: unknown options, a mistyped subcommand, one positional too many.
std::string extras_message(CLI::App& root, CLI::App* at, const std::string& cmd,
                           const std::vector<std::string>& extras) {
  std::vector<std::string> options, arguments;
  for (const auto& w : extras) (w.size() > 1 && w[0] == '-' ? options : arguments).push_back(w);
  if (at == &root && !arguments.empty() && (options.empty() || extras.front() == arguments.front()))
    return fmt::format("unknown subcommand '{}'{}; the subcommands are {}; run 'swavg --help'", arguments.front(),
                       did_you_mean(arguments.front(), subcommand_names(root)),
                       fmt::join(subcommand_names(root), ", "));
  if (!options.empty()) {
    const std::string& first = options.front();
    const std::string hint =
        options.size() == 1 ? did_you_mean(first.substr(0, first.find('=')), option_names(at)) : "";
    return fmt::format("unknown option{} {} for '{}'{}; run '{} --help' for its options",
                       options.size() == 1 ? "" : "s", quoted_list(options), cmd, hint, cmd);
  }
  return fmt::format("unexpected argument{} {} for '{}'; run '{} --help' for the arguments it takes",
                     arguments.size() == 1 ? "" : "s", quoted_list(arguments), cmd, cmd);
}

// "X is required", "X requires Y", "X excludes Y", "X: 1 required TYPE missing": CLI11's forms.
std::string between(const std::string& text, const std::string& mark, bool before) {
  const size_t at = text.find(mark);
  if (at == std::string::npos) return std::string();
  return before ? text.substr(0, at) : text.substr(at + mark.size());
}

}  // namespace

std::string usage_message(CLI::App& root, const CLI::ParseError& e) {
  CLI::App* at = subcommand_of(root);
  std::string cmd;  // "swavg watch ema": every subcommand on the way
  for (const CLI::App* a = at; a != &root && a != nullptr; a = a->get_parent()) cmd = " " + a->get_name() + cmd;
  cmd = "swavg" + cmd;
  const std::string help = fmt::format("run '{} --help' for its options", cmd);
  const std::string what = e.what();
  // With fallthrough, what no subcommand took is left with the root, in command-line order.
  const std::vector<std::string> extras = root.remaining();
  const bool no_subcommand =
      dynamic_cast<const CLI::RequiredError*>(&e) != nullptr && what.rfind("A subcommand", 0) == 0;
  if ((dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr || no_subcommand) && !extras.empty())
    return extras_message(root, at, cmd, extras);
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr && !words_of(after_colon(what)).empty())
    return extras_message(root, at, cmd, words_of(after_colon(what)));
  if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr) {
    if (no_subcommand)
      return fmt::format("no subcommand given: swavg takes one of {}; run 'swavg --help'",
                         fmt::join(subcommand_names(root), ", "));
    const std::string name = between(what, " is required", true);
    const CLI::Option* opt = name.empty() ? nullptr : at->get_option_no_throw(name);
    if (opt != nullptr && !opt->nonpositional())
      return fmt::format("'{}' needs the argument '{}'; run '{} --help' for what it takes", cmd, opt->get_name(), cmd);
    if (opt != nullptr) return fmt::format("'{}' needs {}; {}", cmd, opt->get_name(false, true), help);
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
    const std::string name = between(what, ": ", true);
    const std::string type = between(between(what, " required ", false), " missing", true);
    if (!name.empty() && !type.empty())
      return fmt::format("{}: the value is missing (expected {}); {}", name, type, help);
  }
  if (dynamic_cast<const CLI::RequiresError*>(&e) != nullptr) {
    const std::string name = between(what, " requires ", true);
    if (!name.empty()) return fmt::format("{} needs {}; {}", name, between(what, " requires ", false), help);
  }
  if (dynamic_cast<const CLI::ExcludesError*>(&e) != nullptr) {
    const std::string name = between(what, " excludes ", true);
    if (!name.empty())
      return fmt::format("{} and {} exclude each other: give one of them; {}", name, between(what, " excludes ", false),
                         help);
  }
  if (dynamic_cast<const CLI::ConversionError*>(&e) != nullptr) {
    const std::string name = between(after_colon(what), " = ", true);
    const std::string value = between(after_colon(what), " = ", false);
    const CLI::Option* opt = name.empty() ? nullptr : at->get_option_no_throw(name);
    if (opt != nullptr) {
      const std::string type = opt->get_type_name();
      const std::string expected = type.rfind("INT", 0) == 0     ? "an integer"
                                   : type.rfind("FLOAT", 0) == 0 ? "a number"
                                                                 : "a value of type " + type;
      return fmt::format("{}: expected {}, got '{}'", name, expected, value);
    }
  }
  if (dynamic_cast<const CLI::ValidationError*>(&e) != nullptr) return what;  // "--every: expected ..., got '0'"
  std::string message = what;
  if (!message.empty() && message[0] >= 'A' && message[0] <= 'Z' && (message.size() < 2 || message[1] > 'Z'))
    message[0] = static_cast<char>(message[0] - 'A' + 'a');
  return fmt::format("{}; {}", message, help);
}

void one_value_per_use(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_type_size_max() > 0) opt->check(non_empty_value(), "non-empty");
    if (!opt->nonpositional()) continue;
    opt->allow_extra_args(false);
    // --help would show "TEXT ...", which reads as several values after one flag.
    if (opt->get_expected_max() == CLI::detail::expected_max_vector_size)
      opt->option_text(opt->get_delimiter() != '\0' ? fmt::format("{},...", opt->get_type_name())
                                                    : fmt::format("{} (repeatable)", opt->get_type_name()));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) one_value_per_use(*sub);
}

CLI::Validator integer_in(int64_t lo, int64_t hi) {
  const std::string range = fmt::format("[{}, {}]", lo, hi);
  return CLI::Validator(
      [lo, hi, range](std::string& value) {
        int64_t v = 0;
        const char* end = value.data() + value.size();
        const auto [ptr, ec] = std::from_chars(value.data(), end, v);
        if (value.empty() || ec != std::errc() || ptr != end || v < lo || v > hi)
          return fmt::format("expected an integer in {}, got '{}'", range, value);
        return std::string();
      },
      range);
}

CLI::Validator seconds_check(bool zero_allowed) {
  const std::string bound = zero_allowed ? ">= 0" : "> 0";
  return CLI::Validator(
      [zero_allowed, bound](std::string& value) {
        const std::optional<double> v = parse_decimal(value);
        if (!v || !std::isfinite(*v) || *v < 0 || (*v == 0 && !zero_allowed))
          return fmt::format("expected a finite number of seconds {}, got '{}'", bound, value);
        return std::string();
      },
      "SECONDS " + bound);
}

void add_output_options(CLI::App& app, output_settings& s) {
  add_enum_option(&app, "--progress", s.progress,
                  names_of({progress_mode::automatic, progress_mode::bar, progress_mode::lines, progress_mode::off},
                           progress_mode_name),
                  "Progress on stderr: a bar redrawn in place, plain lines (for logs), or none (default: auto, a "
                  "bar on a terminal and lines otherwise; -q: none)")
      ->envname("SWAVG_PROGRESS");
  add_enum_option(&app, "--color", s.color,
                  names_of({color_mode::automatic, color_mode::always, color_mode::never}, color_mode_name),
                  "Colour the level of log lines (default: auto, on a terminal unless NO_COLOR is set)");
}

CLI::Option* add_format_option(CLI::App* app, std::optional<output_format>& target, bool dcp) {
  if (!dcp)
    return add_enum_option(app, "--format", target,
                           names_of({output_format::torch, output_format::safetensors}, output_format_name),
                           "torch or safetensors (default: from the output's extension)");
  return add_enum_option(
      app, "--format", target,
      names_of({output_format::torch, output_format::safetensors, output_format::dcp}, output_format_name),
      "torch, safetensors or dcp (a Distributed Checkpoint folder, -o DIR/ only; default: from "
      "the output's extension)");
}

CLI::Option* add_device_option(CLI::App* app, const std::string& flags, device_spec& target, const std::string& help) {
  return app
      ->add_option_function<std::string>(
          flags, [&target](const std::string& value) { target = *parse_device(value); }, help)
      ->check(CLI::Validator(
          [](std::string& value) {
            return parse_device(value) ? std::string() : fmt::format("expected cpu or cuda[:N], got '{}'", value);
          },
          "cpu|cuda[:N]"));
}

CLI::Option* add_dtype_option(CLI::App* app, const std::string& flags, std::optional<dtype>& target, bool floating_only,
                              const std::string& help) {
  const char* expected = floating_only ? "float32, float64, float16 or bfloat16" : "a dtype such as float32 or uint8";
  return app
      ->add_option_function<std::string>(
          flags, [&target](const std::string& value) { target = dtype_from_name(value); }, help)
      ->check(CLI::Validator(
          [floating_only, expected](std::string& value) {
            const auto t = dtype_from_name(value);
            if (t && (!floating_only || is_floating(*t))) return std::string();
            return fmt::format("expected {}, got '{}'", expected, value);
          },
          floating_only ? "{float32,float64,float16,bfloat16}" : "DTYPE"));
}

std::vector<std::string> outputs_for(const std::string& pattern, const std::string& placeholder,
                                     const std::string& option, const std::vector<std::string>& values) {
  if (values.size() > 1 && pattern.find(placeholder) == std::string::npos)
    throw usage_error(
        fmt::format("{} {} values write {} outputs: -o must contain {} (e.g. -o out-{}.pt), replaced "
                    "by each value as given",
                    values.size(), option, values.size(), placeholder, placeholder));
  std::vector<std::string> outputs;
  for (const auto& value : values) {
    std::string out = pattern;
    for (auto at = out.find(placeholder); at != std::string::npos; at = out.find(placeholder, at + value.size()))
      out.replace(at, placeholder.size(), value);
    outputs.push_back(std::move(out));
  }
  return outputs;
}

}  // namespace swavg
