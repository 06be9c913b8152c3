/*
 * Options shared by `average` and `ema`: inputs and their order, output, buffers, integer tensors,
 * rules, precision, resume, layout, checks, device and reports.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "cli/input_list.h"
#include "cli/pipeline.h"
#include "cli/watcher.h"
#include "fold/selection.h"

namespace CLI {
class App;
}

namespace swavg {

struct fold_options {
  input_selection selection;
  selection_config choose;  // step range, --every, --last, --top/--bottom by --metric
  int top = 0, bottom = 0;
  fold_job job;
  std::string rules_file;
  std::string report_file;
  bool json = false;
  bool dry_run = false;  // --dry-run: print the plan (cli/dry_run.h) instead of folding
  bool update_bn = false;
  bn_step bn;
  std::string max_shard_size;  // as given; parsed once the output is known to be a folder
  std::string shard;           // --shard I/N
  std::optional<int64_t> shard_count;
  std::function<void(fold_job&)> complete;  // a subcommand's last step once the inputs are known
  // `swavg watch average|ema`: the options of the watcher, which the subcommand's run hands the job
  // to (cli/watcher.h); the options that choose among given inputs or fold once are not added then.
  const watch_settings* watch = nullptr;
};

void add_fold_options(CLI::App* app, fold_options& o);

// Several outputs from one read (a repeated --decay or --weights): each value as given and the
// configuration it gives. Sets job.variants, each output `pattern` (-o) with `placeholder` replaced;
// usage_error when -o lacks the placeholder or the job cannot write several outputs (a folder
// output, --resume, an averaging function), or when two values name one file.
struct output_value {
  std::string label;
  fold_config config;
};
void set_variants(fold_job& job, const std::vector<output_value>& values, const std::string& option,
                  const std::string& placeholder);
// Completes the job (inputs, rules), runs it and writes the report.
void run_fold_command(fold_options o);

}  // namespace swavg
