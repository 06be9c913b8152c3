/*
 * Where strings become types: options whose values are names (modes, policies, formats, dtypes,
 * devices) are parsed by CLI11 straight into the enum or struct the library takes, so a bad value
 * is a usage error (exit 2) naming the option and the accepted values, and nothing below src/cli/
 * sees the text. Counts are checked here too (an integer in a stated range); real-valued settings
 * of a fold are checked by validate_config (fold/config.h), before any file is read.
 *
 * Every option takes one value per use: `--strip-prefix A --strip-prefix B`, or one comma list
 * where the option says so (`--weights 0.5,0.5`). CLI11 would otherwise let a repeatable option
 * take every argument after it, swallowing the inputs that follow (`--strip-prefix module. a.pt`).
 */
#pragma once

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "formats/file/save.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "util/progress.h"
#include "util/terminal.h"

namespace swavg {

template <typename E>
using name_table = std::vector<std::pair<std::string, E>>;

// The table of `values` under the names `name_of` gives them (the names the library prints).
template <typename E>
name_table<E> names_of(std::initializer_list<E> values, const char* (*name_of)(E)) {
  name_table<E> t;
  for (E v : values) t.emplace_back(name_of(v), v);
  return t;
}

// An option taking one of `names` and handing the matching value to `set` (CLI11's
// CheckedTransformer, with the names alone in --help and in the error).
template <typename E>
CLI::Option* add_enum_option_to(CLI::App* app, const std::string& flags, std::function<void(E)> set,
                                name_table<E> names, const std::string& help) {
  std::vector<std::string> keys;
  for (const auto& n : names) keys.push_back(n.first);
  const std::string list = fmt::format("{{{}}}", fmt::join(keys, ","));
  const auto setter = [set, names](const std::string& value) {
    for (const auto& [key, e] : names)
      if (key == value) set(e);
  };
  const auto validate = [names, list](std::string& value) {
    for (const auto& n : names)
      if (n.first == value) return std::string();
    return fmt::format("expected one of {}, got '{}'", list, value);
  };
  return app->add_option_function<std::string>(flags, setter, help)->check(CLI::Validator(validate, list));
}

template <typename E, typename = std::enable_if_t<std::is_enum_v<E>>>
CLI::Option* add_enum_option(CLI::App* app, const std::string& flags, E& target, name_table<E> names,
                             const std::string& help) {
  return add_enum_option_to<E>(
      app, flags, [&target](E e) { target = e; }, std::move(names), help);
}

// The same into an optional (unset: the library's default).
template <typename E>
CLI::Option* add_enum_option(CLI::App* app, const std::string& flags, std::optional<E>& target, name_table<E> names,
                             const std::string& help) {
  return add_enum_option_to<E>(
      app, flags, [&target](E e) { target = e; }, std::move(names), help);
}

// Makes every option of `app` and of its subcommands take exactly one argument per use, so inputs
// and options mix in any order (as cp, tar and torchrun take them). Call once, after setup.
void one_value_per_use(CLI::App& app);

// The message for a command line CLI11 refused (main prints it after "swavg: error: ", exit 2): what
// was wrong, in the subcommand being parsed, and what to do (the option meant, the --help to run).
std::string usage_message(CLI::App& root, const CLI::ParseError& e);

// Accepts a decimal integer in [lo, hi]; the message names the range and the value given.
CLI::Validator integer_in(int64_t lo, int64_t hi);

// Accepts a finite decimal number of seconds, > 0 (or >= 0 with `zero_allowed`); the message names
// the bound and the value given.
CLI::Validator seconds_check(bool zero_allowed);

// --device cpu|cuda|cuda:N.
CLI::Option* add_device_option(CLI::App* app, const std::string& flags, device_spec& target, const std::string& help);

// How swavg writes to stderr, as every subcommand takes it (the program's options, like -v and -q).
struct output_settings {
  progress_mode progress = progress_mode::automatic;
  color_mode color = color_mode::automatic;
};

// --progress auto|bar|lines|off (or $SWAVG_PROGRESS) and --color auto|always|never.
void add_output_options(CLI::App& app, output_settings& s);

// --format torch|safetensors|dcp: the output's format, as every writing subcommand takes it (without
// dcp where the subcommand writes one file).
CLI::Option* add_format_option(CLI::App* app, std::optional<output_format>& target, bool dcp = true);

// The outputs of the values of `option` (posthoc-ema's --sigma-rel, ema's --decay, average's --weights),
// one each: `pattern` (-o) with every `placeholder` ("{decay}") replaced by the value as given.
// usage_error when there are several values and the pattern holds no placeholder.
std::vector<std::string> outputs_for(const std::string& pattern, const std::string& placeholder,
                                     const std::string& option, const std::vector<std::string>& values);

// A dtype by PyTorch's name; `floating_only` accepts float32, float64, float16 and bfloat16 only.
CLI::Option* add_dtype_option(CLI::App* app, const std::string& flags, std::optional<dtype>& target, bool floating_only,
                              const std::string& help);

}  // namespace swavg
