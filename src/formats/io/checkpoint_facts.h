/*
 * What a checkpoint records about its place in a training run: its step and the value of a named
 * metric, read from where the trainers put them, for choosing which checkpoints to fold
 * (fold/selection.h). Nothing is guessed silently: each value carries where it was read, and a
 * metric that is nowhere is reported with every place looked at.
 *
 * A checkpoint's step, the first that applies:
 *   a Hugging Face Trainer folder (checkpoint-N/, or a file inside it): trainer_state.json's global_step
 *   a torch.save file: its top-level `global_step` (Lightning) or `step` integer
 *   its name: `step=N` (Lightning's names), else the last digit run of the name without its
 *   extensions (ckpt_10.pt, checkpoint-12.pth.tar, global_step100), else of its folder's name
 *   (checkpoint-500/model.safetensors); a name of Lightning's NAME=VALUE form without step= has none.
 * A checkpoint's metric NAME, the first that applies:
 *   trainer_state.json: the last log_history entry at the checkpoint's global_step that holds
 *   eval_NAME (Trainer's metric_for_best_model rule: "loss" is eval_loss), else NAME
 *   a torch.save file: a top-level number NAME (timm's train checkpoints: `metric`), or the
 *   current_score of a Lightning ModelCheckpoint whose monitor is NAME (the score of the checkpoint
 *   being saved), or timm's `metric` when its args' eval_metric is NAME ("top1"), or NAME=VALUE in
 *   a Lightning file name (rounded as the name was formatted)
 * or, given instead, a table of step -> value (metric_table) read from a CSV or JSON file.
 */
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace swavg {

// The most bytes a trainer_state.json or a metric table may hold.
inline constexpr uint64_t kMaxMetricFileBytes = uint64_t{256} << 20;

struct recorded_step {
  int64_t value = 0;
  std::string source;  // "trainer_state.json global_step", "entry 'global_step'", "name"
};

struct recorded_metric {
  double value = 0.0;
  std::string source;  // "trainer_state.json log_history 'eval_loss'", "entry 'metric'", "ModelCheckpoint
                       // current_score", "name"
};

struct checkpoint_facts {
  std::optional<recorded_step> step;
  std::optional<int64_t> save_steps;  // trainer_state.json's save_steps: the Trainer saves every so many steps
  std::optional<recorded_metric> metric;
  std::string looked;  // where the metric was looked for, when it was not found
};

// Reads the step of `path` and, unless `metric` is empty, the value of that metric.
// Throws input_error for a record that is there but malformed (a trainer_state.json that is not
// JSON, a global_step that is not an integer, a metric that is not a finite number).
checkpoint_facts read_checkpoint_facts(const std::string& path, const std::string& metric);

// The step in a checkpoint's name, as above; nullopt when there is none.
std::optional<int64_t> step_in_name(const std::string& path);

// The step of a checkpoint that is an entry of a training run's folder (swavg watch's candidates),
// from the entry alone: a folder's own trainer_state.json (and its save_steps), a torch.save
// file's entries, else the entry's own name. Never the run folder's name or a trainer_state.json
// beside the entry, which are the run's, not the checkpoint's. Throws as read_checkpoint_facts.
checkpoint_facts read_entry_facts(const std::string& path);
// The step in the entry's own name only (as above), for one not yet whole enough to read.
std::optional<int64_t> step_in_entry_name(const std::string& path);

// A step -> value table for one metric, read from FILE: CSV with a header row holding a `step`
// column and a column named as the metric (rows whose metric cell is empty are skipped: Lightning's
// CSVLogger leaves it so on training rows), or JSON: a Hugging Face trainer_state.json (its
// log_history, read by Trainer's rule above), a list of objects {"step": S, NAME: V, ...}, or an object {"S": V}. A
// step logged twice keeps its last value (a resumed run logs again).
struct metric_table {
  std::string file;
  std::string metric;
  std::map<int64_t, double> values;
};
metric_table read_metric_table(const std::string& file, const std::string& metric);
// The same from the table's text (`file` names it in messages).
metric_table parse_metric_table(const std::string& text, const std::string& file, const std::string& metric);

}  // namespace swavg
