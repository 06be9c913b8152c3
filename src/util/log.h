/*
 * Logging goes to stderr through spdlog, so stdout carries only results and --json. Every line is
 * `swavg: LEVEL: text`; errors are `swavg: error: ...` (main prints them, CLI11's included). The
 * level is coloured on a terminal unless NO_COLOR or --color never says otherwise (util/terminal.h),
 * and each line is written above the progress bar, never into it (util/progress.h).
 */
#pragma once

#include <cstdint>
#include <string>

#include "util/terminal.h"

namespace swavg {

// verbosity: -1 errors only (-q), 0 info, 1 debug (-v), 2 trace (-vv).
void setup_logging(int verbosity, color_mode color = color_mode::automatic);

// "swavg: error: text\n", the level coloured with `color` (bold red, yellow, green...).
std::string log_line(const std::string& level, const std::string& text, bool color);

// "1 file", "3 files", "0 files"; `plural` where adding an "s" is wrong ("1 entry", "2 entries").
std::string counted(uint64_t n, const std::string& singular, const std::string& plural = "");

}  // namespace swavg
