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

// The kernels' OpenMP threads (libgomp) spin for about 300,000 rounds waiting for the next slice.
// With other busy processes on the cores (shard workers side by side, a loaded CI machine) the
// spinning threads take the cores from the ones with work: two workers on two cores ran 6x slower
// than one. libgomp reads its settings before main(), so, unless the user chose GOMP_SPINCOUNT or
// OMP_WAIT_POLICY, this sets GOMP_SPINCOUNT to kGompSpinCount and runs the same command line again
// (an exec, before anything is read; the hand-over to swavg-torch keeps the setting). Returns if
// nothing is to be done or the exec fails (then swavg runs as it is).
inline constexpr const char* kGompSpinCount = "1000";
void settle_openmp(char** argv);

}  // namespace swavg
