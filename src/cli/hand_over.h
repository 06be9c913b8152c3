/*
 * The hand-over from `swavg`, built without LibTorch, to `swavg-torch`, the same front end linked
 * with LibTorch and installed beside it: a job that needs LibTorch throws needs_libtorch before it
 * writes anything, and main() execs swavg-torch with the same command line (paths already read
 * from stdin by --inputs-from - go along in a memory file).
 */
#pragma once

#include "util/error.h"

namespace swavg {

// Runs the same command line in swavg-torch; returns (an exit code) only if that fails.
int hand_over(int argc, char** argv, const needs_libtorch& why);

}  // namespace swavg
