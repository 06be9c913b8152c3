#include "util/progress.h"

#include <unistd.h>

#include <cstdio>
#include <spdlog/spdlog.h>

namespace swavg {

progress::progress(uint64_t total, std::string label)
    : total_(total),
      label_(std::move(label)),
      enabled_(::isatty(STDERR_FILENO) && spdlog::should_log(spdlog::level::info) && total > 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

progress::~progress() {
  if (enabled_) draw(true);
}

void progress::advance(uint64_t amount) {
  done_ += amount;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100) && done_ < total_) return;
  last_draw_ = now;
  draw(false);
}

void progress::draw(bool final) {
  constexpr int kWidth = 30;
  const double fraction = total_ ? std::min(1.0, static_cast<double>(done_) / static_cast<double>(total_)) : 1.0;
  const int filled = static_cast<int>(fraction * kWidth);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double mb_per_s = seconds > 0 ? static_cast<double>(done_) / 1e6 / seconds : 0.0;
  std::fprintf(stderr, "\r%s [%.*s%*s] %3.0f%% %.0f MB/s%s", label_.c_str(), filled, "##############################",
               kWidth - filled, "", fraction * 100, mb_per_s, final ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace swavg
