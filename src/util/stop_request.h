/*
 * A long-running job (swavg watch) stops on SIGINT or SIGTERM between two steps instead of dying in
 * the middle of one: the handler only records the signal (async-signal-safe), the job asks
 * stop_requested() where a stop is clean and sleeps through wait_for_stop(), which a signal ends at
 * once. A second signal of either kind is not caught: it kills the process as the default action
 * does (outputs are atomic, so even that leaves no partial file; a temp file is cleaned by the next
 * run, util/atomic_file.h).
 */
#pragma once

namespace swavg {

// Installs the handlers for SIGINT and SIGTERM (once; later calls do nothing).
void catch_stop_signals();
// The signal that asked to stop (SIGINT, SIGTERM), 0 while none has.
int stop_requested();
// Sleeps `seconds` or until a stop is requested; returns stop_requested().
int wait_for_stop(double seconds);
// "SIGTERM", "SIGINT", or "signal N".
const char* stop_signal_name(int signal);

}  // namespace swavg
