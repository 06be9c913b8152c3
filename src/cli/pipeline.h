/*
 * The jobs of average/ema, as the command line gives them: paths, formats and options, checked,
 * loaded and handed to the fold engine (src/fold/), and, with --update-bn, chained with the
 * BatchNorm recomputation: the fold goes to a temp file beside the output, and only the final,
 * updated state dict is renamed into place, so the output is never a half-finished average.
 *
 * Every path is checked before anything is read: the output (and --report) neither a file the job
 * reads (the inputs and their shards, --resume, --rules, --inputs-from, --model, --avg-fn, --data)
 * nor inside a folder it reads, nor holding one (a folder output), nor a non-regular file; --report
 * neither the output nor the resumed file (through symlinks and hard links too). The output may be
 * the resumed file or folder itself: `--resume ema.pt -o ema.pt --force` is the rolling EMA, safe
 * because the resumed files stay mapped while their successor is renamed over them.
 */
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/report.h"
#include "cli/worker.h"
#include "fold/config.h"
#include "fold/execute.h"
#include "fold/selection.h"
#include "formats/dataset/dataset.h"
#include "formats/file/save.h"
#include "formats/hf/shard_layout.h"
#include "formats/hf/sharded_input.h"
#include "formats/io/load.h"
#include "formats/io/output_folder.h"
#include "libtorch/bn_replay.h"

namespace swavg {

// One output of a job that writes several from one read (ema --decay A --decay B, average --weights X
// --weights Y): the value as given, which names it in -o's pattern, its file and its configuration.
struct fold_variant {
  std::string label;
  std::string output;
  fold_config config;
};

struct fold_job {
  std::vector<std::string> inputs;  // in fold order
  std::string order = "natural";    // how they were ordered: --sort's name
  checkpoint_selection selection;   // how they were chosen among those given (every candidate)
  load_options load;
  std::string output;
  std::optional<output_format> format;  // default: from the output's extension
  bool force = false;
  std::string resume;                  // an earlier output to continue from
  std::string model;                   // TorchScript whose parameter/buffer split is used
  std::vector<std::string> also_read;  // --rules, --inputs-from: read too, so never an output
  bool drop_objects = false;           // leave non-tensor entries out of the output (--drop-objects)
  std::string report_file;             // --report: written by the caller, its path checked with the others here
  fold_config config;
  // A Hugging Face folder output (-o DIR/): shards of at most max_shard_size bytes, this worker's
  // share only when worker.count > 1 (into OUT.partial/, published by `swavg finalize`).
  bool directory = false;
  uint64_t max_shard_size = kDefaultMaxShardSize;
  worker_id worker;
  // Two or more outputs from one read (fold/execute.h's run_folds), the first being `output` and
  // `config`; empty for a job of one output.
  std::vector<fold_variant> variants;
};

// -o names a folder: it ends in '/' or is an existing directory.
bool is_directory_output(const std::string& output);

struct bn_step {
  dataset_options data;
  bn_options options;
};

struct pipeline_report {
  fold_report fold;
  std::optional<bn_report> bn;
  std::vector<fold_report> more;  // a job of several outputs: the second and later ones
};

// What a fold job decided before its output's first byte: plan_fold_job's, which
// execute_fold_job runs and --dry-run shows (cli/dry_run.h).
struct fold_job_plan {
  std::chrono::steady_clock::time_point start;
  output_format format = output_format::torch;
  fold_inputs inputs;
  fold_config config;  // as folded: a resumed power-function EMA continues from the record's time
  fold_target target;
  fold_outline outline;                   // the fold's plan, the output's tensors and metadata
  std::unique_ptr<output_folder> folder;  // -o DIR/: the folder, its source files and its shards
  checkpoint_location source;
  folder_files extra;
  std::optional<shard_layout> layout;
  // A job of several outputs: each one's configuration, file and outline, the first as above.
  std::vector<fold_config> configs;
  std::vector<fold_target> targets;
  std::vector<fold_outline> outlines;
};

// Checks the options and every path, loads and checks the inputs, and plans the fold and the
// output, writing nothing (with `dry_run`, a worker does not take its lock on OUT.partial/ either).
// Throws what the run would before its first output byte. The plan holds views into its inputs:
// it stays where it was made.
std::unique_ptr<fold_job_plan> plan_fold_job(const fold_job& job, bool dry_run = false);
// Folds and writes what `plan` (plan_fold_job's of `job`) says.
fold_report execute_fold_job(const fold_job& job, fold_job_plan& plan);

// Checks the output path, loads the inputs, folds them and writes the average (plan_fold_job, then
// execute_fold_job). Throws swavg::error subclasses; nothing is written unless it succeeds.
fold_report run_fold_job(const fold_job& job);

// Runs `job` and, with `bn`, the BatchNorm recomputation on its result (job.model is the
// TorchScript model, required then). Nothing appears at job.output unless every step succeeds.
pipeline_report run_fold_pipeline(const fold_job& job, const std::optional<bn_step>& bn);

// Writes update-bn's state dict to `path`, with `metadata` (the weights' own) and the report
// under "swavg_update_bn". Returns the bytes written.
uint64_t save_updated_state(const std::string& path, output_format format, const update_bn_result& updated,
                            std::map<std::string, std::string> metadata, const std::vector<object_entry>& objects = {});

}  // namespace swavg
