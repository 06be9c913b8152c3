/*
 * A job that runs beside a trainer (swavg watch) should take what the trainer leaves: CPU at nice
 * 10 and the idle I/O class (ioprio_set IOPRIO_CLASS_IDLE: its reads and writes wait while others
 * use the disk, under the CFQ/BFQ schedulers; mq-deadline and none ignore the class).
 */
#pragma once

#include <string>

namespace swavg {

// Lowers this process's CPU and I/O priority; returns what was done, in words, for the log
// ("nice 10, idle I/O class"; a step the system refused is named with its error).
std::string lower_priority();

}  // namespace swavg
