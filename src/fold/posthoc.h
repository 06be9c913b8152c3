/*
 * Writes post-hoc EMA reconstructions (phema.h): for each output s, OUT_s = sum_i x_si theta_i over
 * the snapshots' floating tensors, with coefficients x_si that may be negative (so this is not a
 * lerp fold). Each element is accumulated in float64 (x_s0 theta_0 + x_s1 theta_1 + ..., in the
 * snapshots' order) and rounded once to the output dtype (the snapshots' own, or --output-dtype).
 * Buffers, integer tensors and non-tensor entries are copied from the last snapshot given.
 *
 * All outputs come from ONE pass over the inputs, tensor by tensor and slice by slice as the fold
 * does (native_fold.h): each slice of each snapshot is read once, widened, added into every
 * output's float64 slice, and its pages released; memory stays flat (outputs x slice x 8 bytes).
 * The snapshots are checked against one another by the fold's planner (names, shapes, dtypes)
 * before any output is opened; NaN or Inf values in a snapshot that counts (a non-zero coefficient,
 * or the last one for what is copied) or in an output are refused unless allow_nonfinite, as
 * `average` refuses them. Outputs appear all or none: each is a temp file until every tensor
 * of every output is written, and one that fails to be renamed removes those renamed before it.
 */
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fold/plan.h"
#include "formats/file/save.h"
#include "tensor/state_dict.h"

namespace swavg {

struct posthoc_output {
  std::string path;
  std::vector<double> coefficients;  // one per snapshot
  std::map<std::string, std::string> metadata;
};

struct posthoc_result {
  std::vector<tensor_outcome> tensors;
  bool objects_dropped = false;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;  // all outputs together
};

// What run_posthoc decides before its outputs' first byte: the plan, the outputs' tensors and the
// entries and metadata beside them (each output's own metadata is added to `inherited`).
struct posthoc_outline {
  fold_plan plan;
  std::vector<tensor_spec> specs;
  std::vector<object_entry> objects;
  bool objects_dropped = false;
  std::map<std::string, std::string> inherited;
};

// Plans and checks as run_posthoc does, writing nothing (--dry-run); throws what it throws first.
posthoc_outline outline_posthoc(const std::vector<state_dict>& snapshots, const std::vector<posthoc_output>& outputs,
                                output_format format, std::optional<dtype> output_dtype, bool drop_objects);

// The bytes run_posthoc holds while it writes tensor `p` of `outputs` outputs (the float64
// accumulators, the widened and rounded slices, the snapshots' mapped slices; a copied tensor whole).
uint64_t posthoc_working_set(const tensor_plan& p, size_t outputs);

// `snapshots` in the order their coefficients are given, the last one the source of buffers and
// integer tensors. Throws mismatch_error when they disagree, usage_error for objects a safetensors
// output cannot hold (unless drop_objects), input_error for NaN or Inf (unless allow_nonfinite),
// io_error when writing fails; nothing is left behind.
posthoc_result run_posthoc(const std::vector<state_dict>& snapshots, const std::vector<posthoc_output>& outputs,
                           output_format format, std::optional<dtype> output_dtype, bool drop_objects,
                           bool allow_nonfinite = false);
// The same, executing `outline` (outline_posthoc's of the same snapshots and outputs).
posthoc_result run_posthoc(const std::vector<state_dict>& snapshots, const std::vector<posthoc_output>& outputs,
                           const posthoc_outline& outline, output_format format, bool allow_nonfinite = false);

}  // namespace swavg
