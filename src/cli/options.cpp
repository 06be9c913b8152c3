#include "cli/options.h"

namespace swavg {

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
