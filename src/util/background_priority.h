/*
 * A job that runs beside a trainer (swavg watch) should take what the trainer leaves: CPU at nice
 * 10 and the lowest best-effort I/O priority (ioprio_set IOPRIO_CLASS_BE, level 7: served after
 * the trainer's reads and writes under the BFQ scheduler; mq-deadline and none ignore it). Not the
 * idle class: a trainer that keeps the disk busy would starve the watcher until rotation deleted
 * the checkpoints it had not folded yet.
 */
#pragma once

#include <string>

namespace swavg {

// Lowers this process's CPU and I/O priority; returns what was done, in words, for the log
// ("nice 10, I/O priority best-effort 7"; a step the system refused is named with its error).
std::string lower_priority();

}  // namespace swavg
