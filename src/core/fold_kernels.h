/*
 * The SWA step `avg = avg + (x - avg) / (n + 1)` as one pass over memory, instead of ATen's three
 * (sub, div, add) with a temporary in between. Each element goes through the same three IEEE
 * operations in the same order, rounded after each (the file is compiled without floating-point
 * contraction), so the result is bit for bit what ATen computes for AveragedModel.
 */
#pragma once

#include <ATen/core/Tensor.h>

namespace swavg {

// acc (float32 or float64, contiguous CPU) += (x - acc) / divisor, with x contiguous CPU of the same
// numel in float32, float64, float16 or bfloat16 (widened exactly first). Returns false, doing
// nothing, for any other combination (the caller then uses ATen).
bool swa_step_fused(at::Tensor& acc, const at::Tensor& x, int64_t divisor);

}  // namespace swavg
