/*
 * --dry-run: what a job (average, ema, posthoc-ema, convert) would do, from the plan the real run
 * executes (pipeline.h's fold_job_plan, fold/execute.h's fold_outline, the folder's shard layout):
 * the inputs in fold order and the state dict taken in each, every tensor's action, the output's
 * files with their sizes and writers, the bytes read and written, and the expected peak memory.
 * Rendered as a table for people or as one JSON object (--json; README, "Dry runs", has the schema).
 * Nothing here writes a file.
 */
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/pipeline.h"
#include "fold/plan.h"
#include "formats/file/save.h"
#include "formats/hf/shard_layout.h"
#include "util/atomic_file.h"

namespace swavg {

struct dry_run_input {
  std::string path;
  std::string key;     // the state dict taken: "" for the top level
  std::string format;  // "torch", "safetensors", ...
};

struct dry_run_tensor {
  tensor_outcome outcome;
  std::string action;   // shown instead of the outcome's action when set ("copy": convert)
  std::string tied_to;  // torch.save outputs: the earlier tensor whose storage it shares
  std::string file;     // the output file holding it ("" when dropped)
  bool written = true;  // by this run (a worker writes its own shards' tensors only)
};

struct dry_run_file {
  std::string path;  // as written (inside the folder for a folder output)
  size_t tensors = 0;
  uint64_t data_bytes = 0;
  planned_size size;
  size_t worker = 0;  // the worker that writes it
  bool written = true;
};

// One output of a job that writes several from one read (--decay or --weights repeated).
struct dry_run_variant {
  std::string path;
  std::string label;            // the value as given
  std::optional<double> decay;  // ema
  std::vector<double> weights;  // average --weights: normalised
};

struct dry_run {
  std::string command;  // "average", "ema", "posthoc-ema", "convert"
  std::string mode;     // the fold's mode ("swa", "ema", "weighted"), or the command's
  std::vector<dry_run_input> inputs;
  std::string order;  // --sort: natural (step order), name, mtime, none or step; "" where inputs are not ordered
  std::vector<std::string> selection_lines;  // every candidate, kept or not, when the inputs were chosen
  nlohmann::ordered_json selection;          // the same as fold/selection.h's object, null when all were taken
  std::vector<double> weights;               // weighted: normalised, in fold order
  std::string weights_recipe;
  std::vector<dry_run_variant> variants;  // every output of a job of several, the first included
  std::string resume;
  int64_t n = 0;
  std::vector<dry_run_tensor> tensors;
  struct carried_object {
    std::string name, type, from;
  };
  std::vector<carried_object> carried;
  bool objects_dropped = false;
  std::string output;
  std::string format;
  bool folder = false;
  size_t worker_index = 0, worker_count = 1;
  std::vector<dry_run_file> files;
  std::string index;  // a folder's index file, "" when it has one shard
  std::vector<std::string> copied;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  bool bytes_written_exact = true;
  uint64_t peak_memory = 0;
  std::string peak_tensor;  // the tensor whose working set is the largest
  uint64_t largest_working_set = 0;

  // Keeps `bytes` as the largest working set (and `tensor` as peak_tensor) when it is, or is the first.
  void note_working_set(uint64_t bytes, const std::string& tensor);
};

// The extra memory each open output file holds: atomic_file's write buffer.
inline constexpr uint64_t kOutputBufferBytes = kAtomicFileBufferBytes;

dry_run_input dry_run_input_of(const state_dict& sd);
// A tensor's data bytes in an output (none for an alias of an earlier one).
uint64_t spec_data_bytes(const tensor_spec& t);

// The files of a folder output planned as `layout` (into `out`, with `metadata` in each shard),
// in the layout's order, each marked written or not for worker d.worker_index of d.worker_count;
// and the folder's index.
void add_shard_files(dry_run& d, const output_folder& out, const shard_layout& layout,
                     const std::map<std::string, std::string>& metadata);
// bytes_written and bytes_written_exact from the files this run writes.
void total_written(dry_run& d);

// The plan of an average or ema job (plan_fold_job's).
dry_run describe_fold_job(const std::string& command, const fold_job& job, const fold_job_plan& plan);

std::string dry_run_json(const dry_run& d);
// The summary (inputs, output files, counts, bytes, peak memory), then, with `tensors` (-v), every
// tensor's line; names and paths escaped as inspect escapes them.
std::string dry_run_table(const dry_run& d, bool tensors);
// Prints the table or, with `json`, the JSON object on stdout (io_error when stdout fails).
void print_dry_run(const dry_run& d, bool json);

}  // namespace swavg
