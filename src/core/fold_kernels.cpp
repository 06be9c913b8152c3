#include "core/fold_kernels.h"

#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace swavg {
namespace {

constexpr int64_t kGrain = 32768;

template <typename acc_t, typename in_t>
void swa_loop(acc_t* __restrict acc, const in_t* __restrict x, int64_t n, acc_t divisor) {
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const acc_t a = acc[i];
      const acc_t diff = static_cast<acc_t>(x[i]) - a;
      acc[i] = a + diff / divisor;
    }
  });
}

template <typename acc_t>
bool dispatch_input(at::Tensor& acc, const at::Tensor& x, acc_t divisor) {
  acc_t* a = acc.data_ptr<acc_t>();
  const int64_t n = acc.numel();
  switch (x.scalar_type()) {
    case at::kFloat: swa_loop(a, x.data_ptr<float>(), n, divisor); return true;
    case at::kDouble: swa_loop(a, x.data_ptr<double>(), n, divisor); return true;
    case at::kBFloat16: swa_loop(a, x.data_ptr<c10::BFloat16>(), n, divisor); return true;
    case at::kHalf: swa_loop(a, x.data_ptr<c10::Half>(), n, divisor); return true;
    default: return false;
  }
}

}  // namespace

bool swa_step_fused(at::Tensor& acc, const at::Tensor& x, int64_t divisor) {
  if (!acc.device().is_cpu() || !x.device().is_cpu() || !acc.is_contiguous() || !x.is_contiguous() ||
      acc.numel() != x.numel())
    return false;
  // Widening float64 input into a float32 accumulator would round twice; ATen rounds once.
  if (acc.scalar_type() == at::kFloat && x.scalar_type() != at::kDouble)
    return dispatch_input<float>(acc, x, static_cast<float>(divisor));
  if (acc.scalar_type() == at::kDouble) return dispatch_input<double>(acc, x, static_cast<double>(divisor));
  return false;
}

}  // namespace swavg
