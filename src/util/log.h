/*
 * Logging goes to stderr through spdlog, so stdout carries only results and --json. Every line is
 * `swavg: LEVEL: text`; errors are `swavg: error: ...` (main prints them, CLI11's included).
 */
#pragma once

#include <cstdint>
#include <string>

namespace swavg {

// verbosity: -1 errors only (-q), 0 info, 1 debug (-v), 2 trace (-vv).
void setup_logging(int verbosity);

// "1 file", "3 files", "0 files"; `plural` where adding an "s" is wrong ("1 entry", "2 entries").
std::string counted(uint64_t n, const std::string& singular, const std::string& plural = "");

}  // namespace swavg
