/*
 * swavg watch: follows a training run's folder and folds each new checkpoint, in step order, into
 * one or more running averages on disk while the trainer writes (and rotates) them.
 *
 * Each output is a rolling average (`--resume OUT -o OUT`, fold/resume.h): each fold is one
 * plan_fold_job/execute_fold_job of one checkpoint that continues the output and replaces it
 * atomically, so the output on disk is always a whole average, and its resume record lists every
 * checkpoint in it. That record is the watcher's memory: a restarted watcher (after a signal, a
 * crash or SIGKILL at any point) reads it, passes over what it lists and continues after the last
 * step folded, so each checkpoint is folded exactly once and the final output is the bytes one
 * `swavg average|ema` over the same checkpoints in step order writes. The status file (written
 * before each fold with the checkpoint about to be folded, and after it) keeps what the record
 * does not: each folded checkpoint's step, what was passed over and why, what was missed.
 *
 * The loop, every --poll seconds: list the folder (formats/io/run_folder.h), note each entry's
 * signature and how long it has kept it, check the unfinished ones (check_whole), ask
 * fold/watch_queue.h what to fold, fold it into each output, write the status and the report.
 * It stops on SIGINT/SIGTERM (after the fold under way), once an output holds --until-step, after
 * --idle-timeout seconds without a change in the folder, or after one pass (--once).
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "cli/pipeline.h"

namespace swavg {

struct watch_settings {
  std::string match;    // --match GLOB: the names to consider
  double poll = 1.0;    // seconds between looks at the folder
  double settle = 1.0;  // seconds a whole checkpoint must stay unchanged
  double stall = 10.0;  // seconds after which an unfinished one no longer holds later ones back
  std::optional<double> idle_timeout;
  std::optional<int64_t> until_step;
  std::optional<int64_t> from_step, to_step;  // --from-step/--to-step: the steps to fold
  bool once = false;
  std::string status_file;       // default: the (first) output's path + ".watch.json"
  bool normal_priority = false;  // keep the CPU and I/O priority (default: lowered, beside the trainer)
};

// Watches `job.inputs.front()` (the run's folder) and folds into `job.output` (or each of
// `job.variants`) as the header says; `report_file` (--report) is rewritten after each fold.
// Returns when it stops; throws swavg::error for what must stop it (a checkpoint that disagrees
// with the average, an output that cannot be written, options that cannot continue the output).
void run_watcher(const fold_job& job, const watch_settings& settings, const std::string& report_file);

}  // namespace swavg
