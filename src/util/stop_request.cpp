#include "util/stop_request.h"

#include <signal.h>
#include <time.h>

#include <atomic>
#include <cerrno>

namespace swavg {
namespace {

std::atomic<int> g_stop{0};

void on_stop_signal(int signal) {
  g_stop.store(signal);
  // The next one kills: a user who presses Ctrl-C twice, or a supervisor that insists, is obeyed.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGINT, &dfl, nullptr);
  sigaction(SIGTERM, &dfl, nullptr);
}

}  // namespace

void catch_stop_signals() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // the fold under way reads and writes on; wait_for_stop naps briefly
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int stop_requested() { return g_stop.load(); }

int wait_for_stop(double seconds) {
  // Short naps so that a signal delivered to another thread still ends the wait soon.
  constexpr double kNap = 0.05;
  double left = seconds;
  while (left > 0 && stop_requested() == 0) {
    const double nap = left < kNap ? left : kNap;
    timespec t{static_cast<time_t>(nap), static_cast<long>((nap - static_cast<time_t>(nap)) * 1e9)};
    nanosleep(&t, nullptr);
    left -= nap;
  }
  return stop_requested();
}

const char* stop_signal_name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    default: return "a signal";
  }
}

}  // namespace swavg
