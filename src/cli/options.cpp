#include "cli/options.h"

#include <charconv>

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

}  // namespace

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

CLI::Option* add_format_option(CLI::App* app, std::optional<output_format>& target) {
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

}  // namespace swavg
