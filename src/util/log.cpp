#include "util/log.h"

#include <unistd.h>

#include <mutex>
#include <fmt/format.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>

#include "util/progress.h"

namespace swavg {
namespace {

// Each record as one `swavg: LEVEL: text` line, written above the progress bar.
class stderr_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit stderr_sink(bool color) : color_(color) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    const auto level = spdlog::level::to_string_view(msg.level);
    print_above_progress(
        log_line(std::string(level.data(), level.size()), std::string(msg.payload.data(), msg.payload.size()), color_));
  }
  void flush_() override { std::fflush(stderr); }

 private:
  bool color_;
};

const char* color_of(const std::string& level) {
  if (level == "error" || level == "critical") return "\033[1m\033[31m";
  if (level == "warning") return "\033[1m\033[33m";
  if (level == "info") return "\033[32m";
  if (level == "debug") return "\033[36m";
  return "";
}

}  // namespace

std::string log_line(const std::string& level, const std::string& text, bool color) {
  const char* on = color ? color_of(level) : "";
  return fmt::format("swavg: {}{}{}: {}\n", on, level, *on != '\0' ? "\033[0m" : "", text);
}

void setup_logging(int verbosity, color_mode color) {
  spdlog::drop("swavg");
  auto logger =
      std::make_shared<spdlog::logger>("swavg", std::make_shared<stderr_sink>(use_color(color, STDERR_FILENO)));
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
