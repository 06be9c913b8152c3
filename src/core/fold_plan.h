/*
 * The averager's plan for one tensor, and the two ways its average is computed. Planning (which
 * tensor gets which action, accumulator and output dtype) and everything around the arithmetic
 * (copies, NaN checks, writing) is shared; the arithmetic runs either in swavg's own kernels, for
 * the common CPU cases and without LibTorch, or in ATen, for the rest (GPUs, complex tensors,
 * half-precision accumulators), which only the binary that loads LibTorch has.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/averager.h"
#include "core/tensor_view.h"

namespace swavg {

// Tensors are folded in slices of this many elements, so that memory stays flat.
constexpr int64_t kFoldChunkElements = int64_t{1} << 18;

struct fold_source {
  size_t input;  // index into the inputs
  const tensor_view* view;
};

struct tensor_plan {
  std::string name;
  std::vector<fold_source> sources;  // inputs holding the tensor, in fold order
  const tensor_view* resumed = nullptr;
  int64_t resumed_count = 0;
  tensor_outcome outcome;
  std::optional<double> rule_decay;
};

// Takes one finished slice of a tensor's result (output dtype, contiguous, aligned), in order.
using chunk_writer = std::function<void(const void* data, uint64_t bytes)>;

// The lerp weight for folding `input` into an average of k (k >= 1) checkpoints: 1 - decay for EMA,
// w_input / (w_1 + ... + w_input) for weighted averages (weight_total carries the running sum).
double fold_weight(const fold_config& c, const tensor_plan& p, size_t input, int64_t k, double& weight_total);

// Whether swavg's own kernels compute this plan's average (see native_kernels.h), and doing it.
bool native_average_covers(const fold_config& c, const tensor_plan& p);
void native_average(const fold_config& c, const tensor_plan& p, const chunk_writer& write);

// The same with ATen, for everything else. In the binary built without LibTorch these throw
// needs_libtorch; check_device also throws usage_error for a device LibTorch cannot use.
void aten_average(const fold_config& c, const tensor_plan& p, const chunk_writer& write);
void check_device(const std::string& device);

}  // namespace swavg
