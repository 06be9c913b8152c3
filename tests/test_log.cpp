// Counts in messages read as English: "1 file", "2 files", "0 files", and irregular plurals; log lines
// and their colour (--color, NO_COLOR); the terminal's width.
#include <catch2/catch.hpp>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "util/log.h"
#include "util/terminal.h"

using namespace swavg;

TEST_CASE("counted puts the noun in the plural for every count but 1", "[log]") {
  CHECK(counted(0, "file") == "0 files");
  CHECK(counted(1, "file") == "1 file");
  CHECK(counted(2, "file") == "2 files");
  CHECK(counted(1, "entry", "entries") == "1 entry");
  CHECK(counted(3, "entry", "entries") == "3 entries");
  CHECK(counted(UINT64_MAX, "byte") == "18446744073709551615 bytes");
}

TEST_CASE("log_line: 'swavg: LEVEL: text', the level coloured only when asked", "[log]") {
  CHECK(log_line("error", "x.pt: cannot open", false) == "swavg: error: x.pt: cannot open\n");
  CHECK(log_line("error", "x", true) == "swavg: \033[1m\033[31merror\033[0m: x\n");
  CHECK(log_line("warning", "x", true) == "swavg: \033[1m\033[33mwarning\033[0m: x\n");
  CHECK(log_line("trace", "x", true) == "swavg: trace: x\n");  // no colour for it: nothing to reset
}

TEST_CASE("use_color: --color always and never win, auto needs a terminal, no NO_COLOR, a TERM not dumb", "[log]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  ::setenv("NO_COLOR", "1", 1);
  CHECK(use_color(color_mode::always, fds[1]));
  CHECK_FALSE(use_color(color_mode::never, fds[1]));
  CHECK_FALSE(use_color(color_mode::automatic, fds[1]));
  ::setenv("NO_COLOR", "", 1);                            // empty: as if unset
  CHECK_FALSE(use_color(color_mode::automatic, fds[1]));  // a pipe is no terminal
  ::unsetenv("NO_COLOR");
  // The width: $COLUMNS where the descriptor is no terminal, else 80.
  ::setenv("COLUMNS", "132", 1);
  CHECK(terminal_columns(fds[1]) == 132);
  ::setenv("COLUMNS", "10000", 1);  // the widest taken
  CHECK(terminal_columns(fds[1]) == 10000);
  ::setenv("COLUMNS", "10001", 1);
  CHECK(terminal_columns(fds[1]) == 80);
  ::setenv("COLUMNS", "1", 1);
  CHECK(terminal_columns(fds[1]) == 1);
  ::setenv("COLUMNS", "0", 1);
  CHECK(terminal_columns(fds[1]) == 80);
  ::setenv("COLUMNS", "12x", 1);
  CHECK(terminal_columns(fds[1]) == 80);
  ::unsetenv("COLUMNS");
  CHECK(terminal_columns(fds[1]) == 80);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST_CASE("terminal_columns: a terminal's own width first and one that reports none (0 columns) is as no terminal",
          "[log]") {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  const int tty = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  REQUIRE(tty >= 0);
  CHECK(is_terminal(tty));
  struct winsize size {};  // 0 columns: what a new pseudo-terminal reports before anyone sets it
  REQUIRE(::ioctl(tty, TIOCSWINSZ, &size) == 0);
  ::setenv("COLUMNS", "132", 1);
  CHECK(terminal_columns(tty) == 132);
  ::unsetenv("COLUMNS");
  CHECK(terminal_columns(tty) == 80);
  size.ws_col = 200;
  size.ws_row = 50;
  REQUIRE(::ioctl(tty, TIOCSWINSZ, &size) == 0);
  ::setenv("COLUMNS", "132", 1);
  CHECK(terminal_columns(tty) == 200);
  ::unsetenv("COLUMNS");
  // --color auto on a terminal: colour, unless NO_COLOR is set and not empty or TERM is dumb.
  const char* term = std::getenv("TERM");
  const std::string saved_term = term ? term : "";
  ::setenv("TERM", "xterm", 1);
  ::setenv("NO_COLOR", "", 1);
  CHECK(use_color(color_mode::automatic, tty));
  ::setenv("NO_COLOR", "1", 1);
  CHECK_FALSE(use_color(color_mode::automatic, tty));
  ::unsetenv("NO_COLOR");
  CHECK(use_color(color_mode::automatic, tty));
  ::setenv("TERM", "dumb", 1);
  CHECK_FALSE(use_color(color_mode::automatic, tty));
  if (term)
    ::setenv("TERM", saved_term.c_str(), 1);
  else
    ::unsetenv("TERM");
  ::close(tty);
  ::close(master);
}
