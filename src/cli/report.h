/*
 * The JSON reports of average/ema (--report FILE, --json) and update-bn, and the record update-bn
 * leaves in the output's metadata. Field names and order are part of the CLI contract.
 */
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/worker.h"
#include "fold/config.h"
#include "fold/execute.h"
#include "fold/plan.h"
#include "formats/file/save.h"
#include "formats/io/worker_files.h"
#include "libtorch/bn_replay.h"
#include "util/error.h"

namespace swavg {

struct fold_report {
  std::vector<std::string> inputs;  // in fold order
  std::string order;                // --sort: natural (step order), name, mtime or none (as given)
  std::string resume;
  std::string output;
  output_format format = output_format::torch;
  fold_mode mode = fold_mode::swa;
  double decay = 0.0;
  std::optional<power_function_ema> power_ema;  // ema --power-sigma-rel (decay unused)
  int64_t n = 0;                                // checkpoints in the average, resumed ones included
  std::optional<avg_fn_spec> avg_fn;            // the function that averaged (--avg-fn, --multi-avg-fn)
  std::vector<double> weights;                  // weighted: normalised, in fold order
  std::string weights_recipe;                   // weighted: the recipe, "" a list
  nlohmann::ordered_json selection;             // how the inputs were chosen (fold/selection.h), null: all given
  std::vector<tensor_outcome> tensors;
  struct carried_object {
    std::string name, type, from;
  };
  std::vector<carried_object> carried;  // non-tensor entries, from the latest input holding each
  bool objects_dropped = false;         // --drop-objects left them out
  std::vector<tied_tensor> tied;        // tensors written as views of an earlier tensor's storage
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  double wall_time_s = 0.0;
  worker_id worker;
  bool directory = false;  // a folder output: the fields below are reported
  std::string plan_hash;
  struct shard_summary {
    std::string file;
    size_t tensors = 0;
    uint64_t bytes = 0;
  };
  std::vector<shard_summary> shards;  // the ones this worker wrote
  std::vector<std::string> copied, skipped;
};

// The reports below are JSON text in the marked form (util/json_bytes.h: nlohmann parses it and
// dumps it back as it is, whatever bytes the paths in it hold), for emit_report, which writes the
// final form (bytes that are not UTF-8 as \udcXX).

// One JSON object: mode, n, inputs, tensors, buffers, rules, bytes, time, `bn`'s report as
// "update_bn" when given, and last every tensor's outcome ("details").
std::string fold_report_json(const fold_report& report, const bn_report* bn = nullptr);

// One JSON object: model, data, batches, the modules updated (its strings as they are).
nlohmann::ordered_json bn_report_object(const bn_report& report);

// One JSON object: what `swavg finalize` published.
std::string finalize_report_json(const std::string& output, const finalize_result& r, bool verified);

// `j` (its strings as they are: any bytes) as marked text, indented as nlohmann's dump(indent).
std::string report_text(const nlohmann::ordered_json& j, int indent = -1);

// Creates the report's temp file now, before the output is published, so that a report that cannot
// be written fails the run before its output appears; emit_report writes and commits it.
void reserve_report(const std::string& report_file);
// Drops every reservation (their temp files removed): before swavg hands the run over to
// swavg-torch, which reserves them again.
void release_reports();

// Writes `json` (marked text) in the final form and a newline to `report_file` (unless empty) and
// to stdout when `to_stdout`.
void emit_report(const std::string& json, const std::string& report_file, bool to_stdout);
// A run that fails after its --report was reserved writes the failure there instead (main() calls
// this for every subcommand): {"error": {"exit_code", "message", "details"}}, details being the
// whole list the message cut short.
void emit_failure_reports(const error& e);

}  // namespace swavg
