/*
 * Averages of integer tensors, as AveragedModel(use_buffers=True) computes them (an explicit rule
 * or --buffers average asks for it; otherwise integer tensors are never averaged). PyTorch runs
 * its float avg_fn on them and copies the float32 result back, truncating toward zero:
 *   SWA  avg = avg + (x - avg) / (n + 1)         (x - avg in the integer dtype, wrapping; the
 *                                                  true division and the add in float32)
 *   EMA  avg = avg * decay + x * (1 - decay)     (each product rounded to float32, then the sum;
 *                                                  get_ema_multi_avg_fn's integer branch and
 *                                                  get_ema_avg_fn, PyTorch 2.x)
 * then `avg.copy_(result)`: float32 to the integer dtype as c10 converts (through int64 for the
 * narrow signed types and uint8; uint16, uint32 and uint64 as torch 2.14 converts them on x86-64,
 * see from_float). n is the number of checkpoints already folded. The unsigned types wider than
 * uint8 follow the same rules: EMA is what torch 2.14's AveragedModel computes on them; its SWA
 * fails there (PyTorch has no uint16-64 subtraction), so swavg computes the same formula, the
 * difference wrapping in the unsigned dtype and converted to float32 rounding to nearest. Weighted folds have no such
 * counterpart, and bool tensors cannot be averaged (PyTorch refuses bool subtraction): the planner
 * refuses both.
 */
#pragma once

#include "fold/config.h"
#include "fold/native_fold.h"
#include "fold/plan.h"

namespace swavg {

// Whether this planned tensor is an integer average (the kernel below, not native_average).
bool is_integer_average(const tensor_plan& p);

// Folds p's sources (after its resumed average, if any) and writes the result in slices.
void integer_average(const fold_config& c, const tensor_plan& p, const chunk_writer& write);

// One step on n elements of dtype t (int8 to int64, uint8 to uint64): acc = fold(acc, x) with `folded`
// checkpoints already in acc (folded >= 1) and, for EMA, `decay`. Exposed for the unit tests.
void integer_swa_step(dtype t, void* acc, const void* x, int64_t n, int64_t folded);
void integer_ema_step(dtype t, void* acc, const void* x, int64_t n, double decay);

}  // namespace swavg
