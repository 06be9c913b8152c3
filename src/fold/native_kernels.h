/*
 * swavg's own elementwise kernels for the common CPU case, built without LibTorch and computing,
 * element by element, exactly what ATen computes, so results stay bit-identical to PyTorch's:
 *  - SWA, `avg = avg + (x - avg) / (n + 1)`: the same three IEEE operations in the same order, each
 *    rounded (the file is compiled without floating-point contraction), as AveragedModel's sub, div
 *    and add, in one pass instead of three with temporaries in between.
 *  - EMA and weighted folds, `avg = avg.lerp(x, w)`: ATen's CPU lerp rounds once per element,
 *    `fma(w, x - avg, avg)` for |w| < 0.5 and otherwise `x - (x - avg) * (1 - w)` as one FMA
 *    (LibTorch 1.x) or `fma(w - 1, x - avg, x)` (2.x's vector lanes; they differ from 1.x's only
 *    in the sign of a zero, at w = 1, where 2.x's own tails differ from its lanes: see
 *    native_lerp_reproduces). Which form the LibTorch in use computes is a run-time question
 *    (see lerp_form_for).
 *  - dtype conversions among float16, bfloat16, float32, float64 and the 8-bit floats (float8_e4m3fn,
 *    e5m2, e4m3fnuz, e5m2fnuz, e8m0fnu) as Tensor.to() does them (c10's own scalar conversions:
 *    round to nearest even; float64 to 16-bit and 8-bit goes through float32 as in c10). An 8-bit
 *    float input widens exactly, as a 16-bit one does.
 * Loops are also compiled for AVX2 and picked at run time; std::fma is correctly rounded on either.
 * No LibTorch header or library is used: the 16-bit and 8-bit conversions are c10's scalar ones,
 * written out again (native_kernels.cpp), so that swavg builds without LibTorch.
 */
#pragma once

#include <cstdint>
#include <optional>

#include "tensor/dtype.h"

namespace swavg {

enum class lerp_form : int8_t { one_minus_w = 1, w_minus_one = 2 };

// The accumulator dtypes the kernels fold into: float32 and float64.
inline bool is_native_accumulator(dtype t) { return t == dtype::float32 || t == dtype::float64; }

// The form LibTorch computes lerp in for this accumulator and input dtype, or nullopt where swavg's
// kernel cannot reproduce it. With LibTorch loaded this is probed against at::lerp once per pair;
// without it, it is the form of the LibTorch swavg was built against, on CPUs where that LibTorch
// takes its FMA path (AVX2 with FMA). Seam: defined in src/libtorch/fold_aten.cpp, stand-in in
// src/libtorch/without_libtorch.cpp.
std::optional<lerp_form> lerp_form_for(dtype acc, dtype in);
// The form of the LibTorch version swavg was built against, where verified (nullopt: not known).
std::optional<lerp_form> built_lerp_form();
// Whether the kernel's lerp in this form equals ATen's at this weight (as the accumulator's dtype
// holds it). ATen 2.x's vector lanes, fma(w - 1, x - avg, x), and its scalar tails, x - (x - avg) *
// (1 - w) as one FMA, agree everywhere but at w = 1 exactly, where an x of -0 gives zeros of
// different signs; which elements fall in a tail depends on how ATen splits a tensor between
// threads, so at that weight ATen computes the step.
bool native_lerp_reproduces(dtype acc_type, lerp_form form, double weight);
bool cpu_has_avx2_fma();

// In each kernel the input (x, src) need not be aligned to its element size (a tensor read in
// place from inside a file); acc and dst must be.

// acc[i] += (x[i] - acc[i]) / divisor, acc float32 or float64, x float16, bfloat16, float32,
// float64 or an 8-bit float (widened exactly; float64 into float32 is refused: ATen would round it once, not twice).
// Returns false, doing nothing, for other dtypes.
bool native_swa_step(dtype acc_type, void* acc, dtype x_type, const void* x, int64_t n, int64_t divisor);

// acc = lerp(acc, x converted to acc's dtype, weight) in the given form; dtypes as above, plus
// float64 into float32 (Tensor.to() rounds x first, as here). Returns false for other dtypes.
bool native_lerp_step(dtype acc_type, void* acc, dtype x_type, const void* x, int64_t n, double weight, lerp_form form);

// dst = src converted, as Tensor.to(); any dtype to itself (a copy), and among float16, bfloat16,
// float32, float64 and the 8-bit floats. Returns false for other pairs.
bool native_convert(dtype from, const void* src, dtype to, void* dst, int64_t n);

// NaN and Inf values (complex: either part; the 8-bit floats' NaN and Inf encodings); 0 for
// integer, bool and packed types.
int64_t count_nonfinite(dtype t, const void* data, int64_t n);

}  // namespace swavg
