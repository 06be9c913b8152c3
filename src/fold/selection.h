/*
 * Which of the gathered checkpoints a fold takes, and in which order, once they are sorted
 * (cli/input_list.h). In this order:
 *   1. --sort step: by the step each checkpoint records (formats/io/checkpoint_facts.h), ties kept
 *      in the order given (natural order);
 *   2. --from-step A, --to-step B: the steps in [A, B];
 *   3. --every K: the K-th, 2K-th, ...;
 *   4. --last N: the latest N (fairseq's --num-update-checkpoints, LAWA's latest-k);
 *   5. --top N / --bottom N --metric NAME: the N with the highest / lowest value (timm's
 *      avg_checkpoints.py). Ties keep the earlier checkpoint, as Python's stable sorted() does,
 *      reverse=True included; the kept ones stay in step order, the fold order.
 * A checkpoint that lacks what a step needs (a step, the metric) is an error naming it and where
 * it was looked for: never a silent skip. Facts are read only when a step needs them.
 */
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "formats/io/checkpoint_facts.h"

namespace swavg {

enum class metric_rank { none, top, bottom };
const char* metric_rank_option(metric_rank r);  // "--top", "--bottom"

struct selection_config {
  bool sort_by_step = false;
  std::optional<int64_t> from_step, to_step;
  int every = 1;
  int last = 0;  // 0: all
  metric_rank rank = metric_rank::none;
  int rank_count = 0;
  std::string metric;       // NAME of --metric
  std::string metric_file;  // --metric-file: a step -> value table instead of the checkpoints' own records
  bool need_steps = false;  // a later step needs each kept checkpoint's step (--weights wma-step)
};

struct selection_candidate {
  std::string path;
  std::optional<recorded_step> step;
  std::optional<recorded_metric> metric;
  bool kept = true;
  std::string dropped_by;      // the option that left it out: "--to-step", "--every", "--last", "--top", ...
  std::string metric_missing;  // where the metric was looked for, when it was not found
};

struct checkpoint_selection {
  selection_config config;
  std::vector<selection_candidate> candidates;  // in fold order, kept or not
  std::vector<std::string> kept() const;        // the paths folded, in fold order
  std::vector<std::optional<int64_t>> kept_steps() const;
  // Whether anything beyond the sort chose the inputs (a step range, --every, --last, a rank).
  bool chooses() const;
};

// Throws usage_error for options that contradict each other or are out of range (--from-step past
// --to-step, --top without --metric, ...), before any checkpoint is read: select_checkpoints' first
// step, and swavg watch's check of its --from-step/--to-step.
void check_selection_config(const selection_config& c);

// Applies `c` to `sorted` (the gathered paths in sort order). Throws usage_error for bad options or
// a selection that keeps nothing, naming what to change, and for a checkpoint without the step or
// the metric a rule needs, naming it and every place looked at.
checkpoint_selection select_checkpoints(const std::vector<std::string>& sorted, const selection_config& c);

// The selection as one JSON object (its strings the paths' bytes, for util/json_bytes.h to write):
// the rules given and every candidate with its step, metric, and whether it was kept (or by which
// option it was dropped).
nlohmann::ordered_json selection_object(const checkpoint_selection& s);

// One line per candidate, for the dry run and -v: "kept  step 500 (name)  eval_loss 0.231 (...)  path".
std::vector<std::string> selection_lines(const checkpoint_selection& s);

}  // namespace swavg
