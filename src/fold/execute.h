/*
 * Runs a fold: checkpoints, one after the other, into a running average streamed to one output.
 *
 * With n the number of checkpoints already folded (the first is copied, n = 0 -> 1):
 *   SWA       avg = avg + (x - avg) / (n + 1)       (n + 1 an int64 0-dim tensor: the expression
 *                                                    AveragedModel.update_parameters uses on CPU)
 *   EMA       avg = avg.lerp(x, 1 - decay_n)        (get_ema_multi_avg_fn; decay_n: schedule.h)
 *   weighted  avg = avg.lerp(x, w_n / (w_1 + ... + w_n))
 * elementwise in the accumulator dtype, rounding each element exactly as the ATen kernels PyTorch
 * runs (native_fold.h), so results equal PyTorch's bit for bit.
 *
 * Work streams tensor by tensor across all inputs (memory-mapped), and within a tensor in slices:
 * each finished slice is written and its input pages released, so peak memory stays flat whatever
 * the number of checkpoints or the model size. The plan (plan.h) checks every input against the
 * others before the output is opened; nothing appears at the output unless the whole fold succeeds.
 * Non-tensor entries and tied tensors are accounted for as entries.h says. A folder output
 * (formats/io/output_folder.h) is written as shards, and a worker of several folds and reads only the
 * tensors its sink owns (its own shards). Everything here is one
 * pass over the tensors, hashed by name where it looks anything up.
 */
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fold/config.h"
#include "fold/entries.h"
#include "fold/plan.h"
#include "fold/resume.h"
#include "formats/file/save.h"
#include "formats/io/output_folder.h"
#include "tensor/state_dict.h"

namespace swavg {

struct fold_inputs {
  std::vector<state_dict> checkpoints;    // in fold order
  std::optional<resumed_average> resume;  // an earlier output to continue from
  kind_table model_kinds;                 // the parameter/buffer split of --model
};

// One file at `path`, or, with `folder`, the shards of a Hugging Face folder (this worker's), which
// the folder plans and opens once the tensors are known (output_folder::open); `path` is unused then.
struct fold_target {
  std::string path;
  output_format format = output_format::torch;
  bool drop_objects = false;  // leave non-tensor entries out instead of carrying them
  output_folder* folder = nullptr;
};

struct tied_tensor {
  std::string name;
  std::string to;  // the earlier tensor whose output storage it shares
};

struct fold_result {
  std::vector<tensor_outcome> tensors;
  std::vector<carried_entry> carried;  // non-tensor entries: written, or left out when dropped
  bool objects_dropped = false;
  std::vector<tied_tensor> tied;
  int64_t n = 0;  // checkpoints in the average, resumed ones included
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;  // a folder's layout and files are the folder's (output_folder.h)
};

// Everything a fold decides before its output's first byte: the plan (every input checked), the
// output's tensors (tied ones as aliases), the entries carried beside them and the metadata. A
// dry run (--dry-run) shows it; run_fold executes it.
struct fold_outline {
  fold_plan plan;
  std::vector<std::optional<size_t>> ties;  // by plan tensor: the earlier one whose storage it shares
  std::vector<tensor_spec> specs;           // the output's tensors, in order (dropped ones left out)
  std::vector<size_t> spec_tensor;          // by spec: its plan tensor (n_averaged: none, the size)
  std::vector<carried_entry> carried;
  bool objects_dropped = false;
  std::vector<object_entry> objects;  // written beside the tensors
  std::map<std::string, std::string> metadata;
};

// Plans and checks, reading no tensor's bytes and writing nothing. Throws what run_fold would
// before its output is opened (mismatch_error, usage_error, needs_libtorch).
fold_outline outline_fold(const fold_config& c, const fold_inputs& in, const fold_target& target);

// Plans, checks and folds; writes the average with its resume record to `target`, atomically.
// Throws swavg::error subclasses (needs_libtorch, before the output is opened, for a plan the
// kernels here do not cover).
fold_result run_fold(const fold_config& c, const fold_inputs& in, const fold_target& target);
// The same, executing `outline` (outline_fold's of the same c, in and target).
fold_result run_fold(const fold_config& c, const fold_inputs& in, const fold_outline& outline,
                     const fold_target& target);

// Several folds of the same inputs that differ in their schedule only (ema's decays, average's
// weightings), each to its own file, from ONE read of the inputs: every output has the bits its own
// run_fold would give (native_fold.h's lanes). `configs`, `outlines` and `targets` go together, one per
// output; targets are files (no folder), and no --avg-fn. The plans must agree tensor for tensor (a
// logic_error otherwise: callers vary the schedule only). The outputs appear all or none.
std::vector<fold_result> run_folds(const std::vector<fold_config>& configs, const fold_inputs& in,
                                   const std::vector<fold_outline>& outlines, const std::vector<fold_target>& targets);

// Before any input is read: an EMA or weighted fold where swavg's kernels know no lerp form of this
// LibTorch (the binary without LibTorch, built for LibTorch 2.x) needs ATen's lerp, so the job is
// handed to swavg-torch up front rather than after the inputs were mapped and planned.
void require_lerp_kernels(const fold_config& c);

// The record stored beside the average for --resume.
resume_record make_resume_record(const fold_config& c, const fold_plan& plan, const fold_inputs& in);

}  // namespace swavg
