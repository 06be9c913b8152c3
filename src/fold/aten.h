/*
 * Seams: the fold's steps that need LibTorch, defined in src/libtorch/fold_aten.cpp. The binary
 * without LibTorch links src/libtorch/without_libtorch.cpp instead, where each throws
 * needs_libtorch (main() then hands the command line to swavg-torch).
 */
#pragma once

#include "fold/config.h"
#include "fold/native_fold.h"
#include "fold/plan.h"
#include "tensor/device.h"

namespace swavg {

// The average of one planned tensor with ATen's kernels (AveragedModel's and
// get_ema_multi_avg_fn's expressions), for everything native_average does not cover.
void aten_average(const fold_config& c, const tensor_plan& p, const chunk_writer& write);

// Throws usage_error for a device this LibTorch cannot use (no CUDA, no GPU visible); nothing
// for the CPU.
void check_device(const device_spec& device);

}  // namespace swavg
