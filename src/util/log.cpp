#include "util/log.h"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace swavg {

void setup_logging(int verbosity) {
  spdlog::drop("swavg");
  auto logger = spdlog::stderr_color_mt("swavg");
  logger->set_pattern("swavg: %^%l%$: %v");
  spdlog::level::level_enum level = spdlog::level::info;
  if (verbosity < 0) level = spdlog::level::err;
  if (verbosity == 1) level = spdlog::level::debug;
  if (verbosity >= 2) level = spdlog::level::trace;
  logger->set_level(level);
  spdlog::set_default_logger(logger);
}

std::string counted(uint64_t n, const std::string& singular, const std::string& plural) {
  if (n == 1) return "1 " + singular;
  return fmt::format("{} {}", n, plural.empty() ? singular + "s" : plural);
}

}  // namespace swavg
