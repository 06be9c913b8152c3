/*
 * The arithmetic of one planned tensor's average, streamed in slices: swavg's own kernels
 * (native_kernels.h) where they reproduce ATen bit for bit (the common CPU folds), ATen elsewhere
 * (aten.h: GPUs, complex tensors, half-precision accumulators, a lerp the kernel cannot match),
 * which only the binary that loads LibTorch has.
 */
#pragma once

#include <cstdint>
#include <functional>

#include "fold/config.h"
#include "fold/plan.h"

namespace swavg {

// Tensors are folded in slices of this many elements, so that memory stays flat.
constexpr int64_t kFoldChunkElements = int64_t{1} << 18;

// Takes one finished slice of a tensor's result (output dtype, contiguous, aligned), in order.
using chunk_writer = std::function<void(const void* data, uint64_t bytes)>;

// Whether swavg's own kernels compute this plan's average, and doing it.
bool native_average_covers(const fold_config& c, const tensor_plan& p);
class prefetcher;
// `ahead`, when given, is told after each slice how far the inputs have been read.
void native_average(const fold_config& c, const tensor_plan& p, const chunk_writer& write,
                    prefetcher* ahead = nullptr);

}  // namespace swavg
