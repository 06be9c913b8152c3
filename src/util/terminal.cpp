#include "util/terminal.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace swavg {

const char* color_mode_name(color_mode m) {
  switch (m) {
    case color_mode::automatic: return "auto";
    case color_mode::always: return "always";
    case color_mode::never: return "never";
  }
  return "?";
}

bool is_terminal(int fd) { return ::isatty(fd) == 1; }

int terminal_columns(int fd) {
  struct winsize size {};
  if (::ioctl(fd, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long n = std::strtol(columns, &end, 10);
    if (end != columns && *end == '\0' && n > 0 && n <= 10000) return static_cast<int>(n);
  }
  return 80;
}

bool use_color(color_mode mode, int fd) {
  if (mode != color_mode::automatic) return mode == color_mode::always;
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  if (no_color != nullptr && *no_color != '\0') return false;
  if (term != nullptr && std::strcmp(term, "dumb") == 0) return false;
  return is_terminal(fd);
}

}  // namespace swavg
