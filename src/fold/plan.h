/*
 * Planning a fold: for every tensor name (in first-seen order across the inputs), the inputs that
 * hold it, what happens to it and in which dtypes. The decision, per tensor:
 *   1. the first rule whose pattern it matches (--rules), obeyed whatever the dtype, else
 *   2. buffers (the model's or the inputs' own split, else BatchNorm's names, or --buffer REGEX)
 *      with --buffers first or average: taken from the first checkpoint, or averaged, else
 *   3. integer and bool tensors: --int latest|first (error: latest, with the values compared
 *      while folding), else
 *   4. buffers with --buffers latest: taken from the latest checkpoint, else
 *   5. averaged.
 * An integer tensor averaged (by 1 or 2) is averaged as AveragedModel averages it (int_average.h);
 * a bool one, or one in a weighted fold, is a usage_error. A packed tensor (float4_e2m1fn_x2,
 * complex32, bits*: dtype.h) is a usage_error unless a rule or --buffers takes it from one
 * checkpoint (or drops it).
 * Averaged tensors accumulate in float32 for 16-bit and 8-bit float inputs and in their own dtype
 * otherwise (--accumulate; an 8-bit float accumulator is a usage_error), and are written in the
 * input's dtype (--output-dtype), rounded once.
 *
 * plan_fold is pure: it reads names, shapes and dtypes only, never a tensor's bytes. Before
 * planning, every input is checked against the others and the resumed average; every difference
 * is listed in one mismatch_error.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fold/config.h"
#include "fold/resume.h"
#include "tensor/state_dict.h"

namespace swavg {

// Tensors are folded in slices of this many elements, so that memory stays flat.
constexpr int64_t kFoldChunkElements = int64_t{1} << 18;

// Why a tensor gets its action (the list above): a rule (1), --buffers (2, 4), --int (3), the
// default average (5); convert copies every tensor.
enum class outcome_reason { rule, buffer, ints, by_default, convert };
const char* reason_name(outcome_reason r);  // "rule", "buffer", "int", "default", "convert"

struct tensor_outcome {
  std::string name;
  tensor_action action = tensor_action::average;
  bool buffer = false;
  std::string rule;  // pattern of the rule that decided, if any
  outcome_reason reason = outcome_reason::by_default;
  int64_t count = 0;  // checkpoints folded into it (including resumed ones)
  dtype input_type = dtype::float32;
  dtype accumulate_type = dtype::float32;
  dtype output_type = dtype::float32;
};

struct fold_source {
  size_t input;  // index into the inputs
  const tensor_view* view;
};

struct tensor_plan {
  std::string name;
  std::vector<fold_source> sources;  // inputs holding the tensor, in fold order (none: resumed only)
  const tensor_view* resumed = nullptr;
  int64_t resumed_count = 0;
  tensor_outcome outcome;
  std::optional<double> rule_decay;
};

// The tensor's shape: its inputs', or the resumed average's for one that only it holds (--allow-missing).
inline const std::vector<int64_t>& shape_of(const tensor_plan& p) {
  return (p.sources.empty() ? p.resumed : p.sources.front().view)->shape;
}

struct fold_plan {
  std::vector<tensor_plan> tensors;  // in first-seen order
  int64_t n = 0;                     // checkpoints in the average, resumed ones included
};

// Tensor kinds a TorchScript model (--model) declares, by name.
using kind_table = std::unordered_map<std::string, tensor_kind>;

// Throws mismatch_error listing every difference between the inputs (and the resumed average),
// usage_error for a bad --buffer pattern or an integer average PyTorch has no counterpart for.
// Time and memory are linear in the number of tensors (names are hashed once).
fold_plan plan_fold(const fold_config& c, const std::vector<state_dict>& inputs, const resumed_average* resume,
                    const kind_table& model_kinds = {});

// The accumulator dtype for a floating tensor of dtype t (others: t itself).
dtype accumulator_for(dtype t, accumulate_policy p);

// The bytes the fold holds while it folds `p` with swavg's own kernels (native_fold.h,
// int_average.h), from the quantities they allocate and map: an averaged floating tensor streams in
// slices of kFoldChunkElements (each input's mapped slice, the accumulator, the output conversion);
// an integer average maps each input whole; a copied tensor maps the one it copies whole (and its
// conversion); a strided input is gathered whole. ATen's fold (swavg-torch) is not modelled. With
// `outputs` (run_folds), each output holds its own accumulator and output slices.
uint64_t fold_working_set(const tensor_plan& p, size_t outputs = 1);

}  // namespace swavg
