// Counts in messages read as English: "1 file", "2 files", "0 files", and irregular plurals; log lines
// and their colour (--color, NO_COLOR); the terminal's width.
#include <catch2/catch.hpp>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>

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
