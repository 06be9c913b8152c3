#include "util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <fmt/format.h>

#include "util/terminal.h"

namespace swavg {
namespace {

constexpr double kRedrawSeconds = 0.1;  // the bar is redrawn at most this often
constexpr double kLeaveSeconds = 1.0;   // a phase this long leaves its last bar; a nested one is announced
constexpr int kMinBar = 10, kMaxBar = 40;
constexpr const char* kLinePrefix = "swavg: progress: ";
const char* const kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};

// `bytes` in units of 1000^unit, three significant digits.
std::string scaled(uint64_t bytes, int unit) {
  if (unit == 0) return fmt::format("{}", bytes);
  const double v = static_cast<double>(bytes) / std::pow(1000.0, unit);
  return fmt::format(v < 9.995 ? "{:.2f}" : v < 99.95 ? "{:.1f}" : "{:.0f}", v);
}

int unit_of(uint64_t bytes) {
  int unit = 0;
  for (double v = static_cast<double>(bytes); v >= 999.5 && unit < 6; v /= 1000) ++unit;
  return unit;
}

// "1.62/2.97 GB": the done part in the total's unit.
std::string bytes_of(uint64_t done, uint64_t total) {
  if (total == 0) return human_bytes(done);
  const int unit = unit_of(total);
  return fmt::format("{}/{} {}", scaled(done, unit), scaled(total, unit), kUnits[unit]);
}

}  // namespace

const char* progress_mode_name(progress_mode m) {
  switch (m) {
    case progress_mode::automatic: return "auto";
    case progress_mode::bar: return "bar";
    case progress_mode::lines: return "lines";
    case progress_mode::off: return "off";
  }
  return "?";
}

std::string human_bytes(uint64_t bytes) {
  const int unit = unit_of(bytes);
  return fmt::format("{} {}", scaled(bytes, unit), kUnits[unit]);
}

std::string clock_text(double seconds) {
  const auto s = static_cast<uint64_t>(std::max(0.0, seconds));
  if (s >= 3600) return fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60);
  return fmt::format("{}:{:02}", s / 60, s % 60);
}

progress_meter::progress_meter(progress_style style, double line_interval)
    : style_(style), line_interval_(line_interval) {}

namespace {

// "1 tensor", "780 tensors": `unit` is singular.
std::string counted_units(uint64_t n, const std::string& unit) {
  return fmt::format("{} {}{}", n, unit, n == 1 || unit.empty() ? "" : "s");
}

struct measures {
  std::optional<double> fraction;  // of the total done, when a total is known
  std::string bytes, items, rate, eta;
};

template <typename Phase>
measures measure(const Phase& p, double now) {
  measures m;
  const double elapsed = now - p.start;
  if (p.total_bytes > 0)
    m.fraction = std::min(1.0, static_cast<double>(p.done_bytes) / static_cast<double>(p.total_bytes));
  else if (p.total_items > 0)
    m.fraction = std::min(1.0, static_cast<double>(p.done_items) / static_cast<double>(p.total_items));
  if (p.total_bytes > 0 || p.done_bytes > 0) m.bytes = bytes_of(p.done_bytes, p.total_bytes);
  if (p.total_items > 0 || p.done_items > 0)
    m.items = p.total_items > 0 ? fmt::format("{}/{}", p.done_items, counted_units(p.total_items, p.unit))
                                : counted_units(p.done_items, p.unit);
  if (elapsed > 0 && p.done_bytes > 0)
    m.rate = human_bytes(static_cast<uint64_t>(static_cast<double>(p.done_bytes) / elapsed)) + "/s";
  if (m.fraction && *m.fraction > 0 && *m.fraction < 1 && elapsed >= kLeaveSeconds)
    m.eta = clock_text(elapsed * (1 - *m.fraction) / *m.fraction);
  return m;
}

std::string percent(double fraction) { return fmt::format("{:3d}%", static_cast<int>(fraction * 100)); }

}  // namespace

// "folding  55% [######------]  1.62/2.97 GB  412/780 tensors  1.82 GB/s  0:01 ETA 0:01", the parts
// that do not fit in `width` left out, the least telling first.
std::string progress_meter::bar_text(const phase& p, double now, int width) const {
  const measures m = measure(p, now);
  const size_t room = static_cast<size_t>(std::max(width, 20) - 1);  // the last column would wrap
  std::string time = clock_text(now - p.start);
  if (!m.eta.empty()) time += " ETA " + m.eta;
  // Shown in this order; dropped, when too long, in the order: the items, the rate, the bytes, the
  // ETA, the bar.
  std::vector<std::string> tail = {m.bytes, m.items, m.rate, time};
  bool bar = m.fraction.has_value();
  const auto length = [&](size_t bar_width) {
    size_t n = p.name.size() + (m.fraction ? 5 : 0) + (bar ? bar_width + 3 : 0);
    for (const auto& t : tail)
      if (!t.empty()) n += t.size() + 2;
    return n;
  };
  for (size_t drop : {1, 2, 0}) {
    if (length(kMinBar) <= room) break;
    tail[drop].clear();
  }
  if (length(kMinBar) > room && !m.eta.empty()) tail[3] = clock_text(now - p.start);
  if (length(kMinBar) > room) bar = false;
  std::string text = p.name;
  if (m.fraction) text += " " + percent(*m.fraction);
  if (bar) {
    const size_t w = std::min<size_t>(kMaxBar, kMinBar + (room - length(kMinBar)));
    const auto filled = static_cast<size_t>(*m.fraction * static_cast<double>(w));
    text += " [" + std::string(filled, '#') + std::string(w - filled, '-') + "]";
  }
  for (const auto& t : tail)
    if (!t.empty()) text += "  " + t;
  if (text.size() > room) text.resize(room);
  return text;
}

// "folding 55%, 1.62/2.97 GB, 412/780 tensors, 1.82 GB/s, 0:12 elapsed, ETA 0:08"
std::string progress_meter::line_text(const phase& p, double now) const {
  const measures m = measure(p, now);
  std::string text = p.name;
  if (m.fraction) text += fmt::format(" {}%", static_cast<int>(*m.fraction * 100));
  for (const auto& part : {m.bytes, m.items, m.rate})
    if (!part.empty()) text += ", " + part;
  text += ", " + clock_text(now - p.start) + " elapsed";
  if (!m.eta.empty()) text += ", ETA " + m.eta;
  return kLinePrefix + text + "\n";
}

std::string progress_meter::start_line(const phase& p) const {
  std::string totals;
  if (p.total_bytes > 0) totals = human_bytes(p.total_bytes);
  if (p.total_items > 0) totals += (totals.empty() ? "" : ", ") + counted_units(p.total_items, p.unit);
  return fmt::format("{}{} started{}\n", kLinePrefix, p.name, totals.empty() ? "" : ": " + totals);
}

std::string progress_meter::end_line(const phase& p, double now) const {
  const measures m = measure(p, now);
  std::string text = fmt::format("{}{} done in {}", kLinePrefix, p.name, clock_text(now - p.start));
  std::string parts;
  if (p.done_bytes > 0) parts = human_bytes(p.done_bytes);
  if (p.done_items > 0) parts += (parts.empty() ? "" : ", ") + counted_units(p.done_items, p.unit);
  if (!m.rate.empty()) parts += ", " + m.rate;
  return text + (parts.empty() ? "" : ": " + parts) + "\n";
}

std::string progress_meter::draw(double now, int width, bool force) {
  if (phases_.empty() || (!force && now - last_draw_ < kRedrawSeconds)) return "";
  std::string text = bar_text(phases_.back(), now, width);
  last_draw_ = now;
  if (!force && text == last_text_ && drawn_ > 0) return "";
  std::string out = "\r" + text;
  if (drawn_ > text.size()) out += std::string(drawn_ - text.size(), ' ');
  drawn_ = text.size();
  last_text_ = std::move(text);
  return out;
}

// Lines mode: a nested phase's start line once it has lasted kLeaveSeconds; a line every interval.
std::string progress_meter::lines_due(double now) {
  if (phases_.empty()) return "";
  phase& p = phases_.back();
  if (!p.announced) {
    if (now - p.start < kLeaveSeconds) return "";
    p.announced = true;
    p.last_line = now;
    return start_line(p);
  }
  if (now - p.last_line < line_interval_) return "";
  p.last_line = now;
  return line_text(p, now);
}

std::string progress_meter::begin(const std::string& name, uint64_t total_bytes, uint64_t total_items,
                                  const std::string& unit, double now, int width) {
  phase p;
  p.name = name;
  p.unit = unit;
  p.total_bytes = total_bytes;
  p.total_items = total_items;
  p.start = p.last_line = now;
  p.announced = phases_.empty();
  phases_.push_back(std::move(p));
  if (style_ == progress_style::lines) return phases_.back().announced ? start_line(phases_.back()) : "";
  return draw(now, width, true);
}

std::string progress_meter::advance(uint64_t bytes, uint64_t items, double now, int width) {
  if (phases_.empty()) return "";
  phases_.back().done_bytes += bytes;
  phases_.back().done_items += items;
  return tick(now, width);
}

std::string progress_meter::tick(double now, int width) {
  return style_ == progress_style::lines ? lines_due(now) : draw(now, width, false);
}

std::string progress_meter::end(double now, int width) {
  if (phases_.empty()) return "";
  const phase p = std::move(phases_.back());
  phases_.pop_back();
  if (style_ == progress_style::lines) return p.announced ? end_line(p, now) : "";
  std::string out;
  if (phases_.empty() && now - p.start >= kLeaveSeconds) {
    std::string text = bar_text(p, now, width);
    out = "\r" + text + (drawn_ > text.size() ? std::string(drawn_ - text.size(), ' ') : "") + "\n";
    drawn_ = 0;
  } else {
    out = clear();
  }
  return out + redraw(now, width);
}

std::string progress_meter::abandon() {
  if (phases_.empty()) return "";
  phases_.pop_back();
  return clear();
}

std::string progress_meter::clear() {
  if (style_ != progress_style::bar || drawn_ == 0) return "";
  std::string out = "\r" + std::string(drawn_, ' ') + "\r";
  drawn_ = 0;
  last_text_.clear();
  return out;
}

std::string progress_meter::redraw(double now, int width) {
  if (style_ != progress_style::bar) return "";
  return draw(now, width, true);
}

// The process's progress: the meter, stderr, the clock and the ticker thread.
namespace {

class console {
 public:
  ~console() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (ticker_.joinable()) ticker_.join();
  }

  void configure(std::optional<progress_style> style) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (style)
      meter_.emplace(*style);
    else
      meter_.reset();
    style_ = style;
  }

  bool on() {
    std::lock_guard<std::mutex> lock(mutex_);
    return meter_.has_value();
  }

  template <typename F>
  void with_meter(F f) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!meter_) return;
    put(f(*meter_, now(), terminal_columns(STDERR_FILENO)));
    if (!ticker_.joinable() && meter_->active()) ticker_ = std::thread([this] { tick_loop(); });
  }

  void print(const std::string& text) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!meter_) return put(text);
    const double t = now();
    const int width = terminal_columns(STDERR_FILENO);
    put(meter_->clear() + text + meter_->redraw(t, width));
  }

 private:
  static double now() {
    static const auto origin = std::chrono::steady_clock::now();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - origin).count();
  }

  static void put(const std::string& text) {
    if (text.empty()) return;
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }

  void tick_loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      wake_.wait_for(lock, std::chrono::milliseconds(250));
      if (!stop_ && meter_) put(meter_->tick(now(), terminal_columns(STDERR_FILENO)));
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::optional<progress_meter> meter_;
  std::optional<progress_style> style_;
  std::thread ticker_;
  bool stop_ = false;
};

console& the_console() {
  static console c;
  return c;
}

}  // namespace

void configure_progress(progress_mode mode, bool shown) {
  std::optional<progress_style> style;
  if (shown && mode == progress_mode::bar) style = progress_style::bar;
  if (shown && mode == progress_mode::lines) style = progress_style::lines;
  if (shown && mode == progress_mode::automatic)
    style = is_terminal(STDERR_FILENO) ? progress_style::bar : progress_style::lines;
  the_console().configure(style);
}

void print_above_progress(const std::string& text) { the_console().print(text); }

progress::progress(std::string name, uint64_t total_bytes, uint64_t total_items, std::string unit)
    : exceptions_(std::uncaught_exceptions()) {
  next(std::move(name), total_bytes, total_items, std::move(unit));
}

progress::~progress() {
  if (!open_) return;
  if (std::uncaught_exceptions() > exceptions_)
    the_console().with_meter([](progress_meter& m, double, int) { return m.abandon(); });
  else
    the_console().with_meter([](progress_meter& m, double now, int width) { return m.end(now, width); });
}

void progress::advance(uint64_t bytes, uint64_t items) {
  if (!open_) return;
  the_console().with_meter(
      [bytes, items](progress_meter& m, double now, int width) { return m.advance(bytes, items, now, width); });
}

void progress::next(std::string name, uint64_t total_bytes, uint64_t total_items, std::string unit) {
  if (open_) the_console().with_meter([](progress_meter& m, double now, int width) { return m.end(now, width); });
  open_ = the_console().on();
  if (!open_) return;
  the_console().with_meter([&](progress_meter& m, double now, int width) {
    return m.begin(name, total_bytes, total_items, unit, now, width);
  });
}

}  // namespace swavg
