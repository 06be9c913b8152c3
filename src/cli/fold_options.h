/*
 * Options shared by `average` and `ema`: inputs and their order, output, buffers, integer tensors,
 * rules, precision, resume, layout, checks, device and reports.
 */
#pragma once

#include <string>
#include <vector>

#include "core/fold_pipeline.h"
#include "core/input_list.h"

namespace CLI {
class App;
}

namespace swavg {

struct fold_options {
  input_selection selection;
  fold_job job;
  std::string buffers = "latest";
  std::string ints = "latest";
  std::string rules_file;
  std::string accumulate = "auto";
  std::string output_dtype;
  std::string layout = "state-dict";
  std::string report_file;
  bool json = false;
  bool update_bn = false;
  bn_step bn;
  std::string input_dtype;
};

void add_fold_options(CLI::App* app, fold_options& o);
// Turns the parsed strings into the job's config, runs it, writes the report.
void run_fold_command(fold_options o);

}  // namespace swavg
