/*
 * Logging goes to stderr through spdlog, so stdout carries only results and --json.
 */
#pragma once

namespace swavg {

// verbosity: -1 errors only (-q), 0 info, 1 debug (-v), 2 trace (-vv).
void setup_logging(int verbosity);

}  // namespace swavg
