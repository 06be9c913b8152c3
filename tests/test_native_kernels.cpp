// swavg's own kernels against ATen's (the ones torch.optim.swa_utils and Tensor.to run on CPU), from
// aligned and misaligned inputs.
#include <ATen/Functions.h>
#include <catch2/catch.hpp>

#include <cstring>
#include <vector>

#include "fold/native_kernels.h"
#include "libtorch/tensor_bridge.h"

using namespace swavg;

namespace {

// Awkward values: wide magnitudes, both signs, zeros of both signs, some overflowing 16-bit types.
at::Tensor awkward(int64_t n, at::ScalarType type, uint64_t seed) {
  at::manual_seed(seed);
  at::Tensor t = at::randn({n}, at::kDouble).mul(at::pow(2.0, at::randint(-30, 30, {n}, at::kDouble)));
  t.slice(0, 0, n, 11).zero_();
  t.slice(0, 5, n, 13).fill_(-0.0);
  return t.to(type);
}

bool same_bits(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.nbytes() == b.nbytes() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// The tensor's bytes one byte past an aligned address, as a chunk lies inside a .distcp: the
// kernels' inputs need not be aligned.
struct misaligned {
  explicit misaligned(const at::Tensor& t) : bytes(t.nbytes() + 1) {
    std::memcpy(bytes.data() + 1, t.data_ptr(), t.nbytes());
  }
  const void* data() const { return bytes.data() + 1; }
  std::vector<uint8_t> bytes;
};

const dtype kFloats[] = {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16};
const int64_t kSizes[] = {1, 15, 65, 300007};

}  // namespace

TEST_CASE("SWA step equals ATen's sub, div and add", "[native_kernels]") {
  for (dtype acc : {dtype::float32, dtype::float64}) {
    for (dtype in : kFloats) {
      for (int64_t n : kSizes) {
        const at::Tensor start = awkward(n, to_scalar_type(acc), 1);
        const at::Tensor x = awkward(n, to_scalar_type(in), 2);
        for (int64_t divisor : {2, 3, 7, 1000}) {
          at::Tensor expected = start.clone();
          expected.add_(x.to(expected.scalar_type()).sub(expected).div(at::scalar_tensor(divisor, at::kLong)));
          at::Tensor got = start.clone();
          const bool ran = native_swa_step(acc, got.data_ptr(), in, x.data_ptr(), n, divisor);
          INFO("acc " << dtype_name(acc) << " input " << dtype_name(in) << " n " << n << " divisor " << divisor);
          // A float64 input into a float32 accumulator rounds once in ATen; the kernel declines it.
          REQUIRE(ran == !(acc == dtype::float32 && in == dtype::float64));
          if (!ran) continue;
          CHECK(same_bits(got, expected));
          at::Tensor from_unaligned = start.clone();
          REQUIRE(native_swa_step(acc, from_unaligned.data_ptr(), in, misaligned(x).data(), n, divisor));
          CHECK(same_bits(from_unaligned, expected));
        }
      }
    }
  }
}

TEST_CASE("lerp step equals at::lerp in the form the probe finds", "[native_kernels]") {
  for (dtype acc : {dtype::float32, dtype::float64}) {
    for (dtype in : kFloats) {
      const auto form = lerp_form_for(acc, in);
#if defined(__x86_64__)
      // PyTorch's CPU lerp is an FMA wherever the CPU has one, in the form of the version we build with.
      if (cpu_has_avx2_fma() && built_lerp_form()) CHECK(form == built_lerp_form());
#endif
      if (!form) continue;
      for (int64_t n : kSizes) {
        const at::Tensor start = awkward(n, to_scalar_type(acc), 3);
        const at::Tensor x = awkward(n, to_scalar_type(in), 4);
        for (double w : {1e-4, 0.001, 0.25, 0.5, 0.75, 0.9999, 1.0}) {
          at::Tensor expected = start.clone().lerp_(x.to(start.scalar_type()), w);
          at::Tensor got = start.clone();
          REQUIRE(native_lerp_step(acc, got.data_ptr(), in, x.data_ptr(), n, w, *form));
          INFO("acc " << dtype_name(acc) << " input " << dtype_name(in) << " n " << n << " weight " << w);
          CHECK(same_bits(got, expected));
          at::Tensor from_unaligned = start.clone();
          REQUIRE(native_lerp_step(acc, from_unaligned.data_ptr(), in, misaligned(x).data(), n, w, *form));
          CHECK(same_bits(from_unaligned, expected));
        }
      }
    }
  }
}

TEST_CASE("dtype conversions equal Tensor.to", "[native_kernels]") {
  for (dtype from : kFloats) {
    for (dtype to : kFloats) {
      const at::Tensor src = awkward(100003, to_scalar_type(from), 5);
      const at::Tensor expected = src.to(to_scalar_type(to));
      at::Tensor got = at::empty_like(expected);
      REQUIRE(native_convert(from, src.data_ptr(), to, got.data_ptr(), src.numel()));
      INFO(dtype_name(from) << " to " << dtype_name(to));
      CHECK(same_bits(got, expected));
      at::Tensor from_unaligned = at::empty_like(expected);
      REQUIRE(native_convert(from, misaligned(src).data(), to, from_unaligned.data_ptr(), src.numel()));
      CHECK(same_bits(from_unaligned, expected));
    }
  }
  int64_t ints[3] = {1, 2, 3};
  float out[3];
  CHECK_FALSE(native_convert(dtype::int64, ints, dtype::float32, out, 3));
}

TEST_CASE("non-finite values are counted as isfinite says", "[native_kernels]") {
  for (dtype t : {dtype::float32, dtype::float64, dtype::float16, dtype::bfloat16, dtype::complex64}) {
    at::Tensor v = awkward(1001, at::kDouble, 6).to(to_scalar_type(t));
    v.slice(0, 3, 1001, 97).fill_(std::numeric_limits<double>::infinity());
    v.slice(0, 7, 1001, 89).fill_(std::numeric_limits<double>::quiet_NaN());
    if (t == dtype::float16) v.slice(0, 1, 1001, 50).fill_(60000.0);  // finite, near float16's largest
    const int64_t expected = at::logical_not(at::isfinite(v)).sum().item<int64_t>();
    INFO(dtype_name(t));
    CHECK(expected > 0);
    CHECK(count_nonfinite(t, v.data_ptr(), v.numel()) == expected);
  }
  int64_t ints[2] = {0, -1};
  CHECK(count_nonfinite(dtype::int64, ints, 2) == 0);
}

TEST_CASE("strided views are gathered as Tensor.contiguous does", "[native_kernels]") {
  const at::Tensor base = at::arange(0, 2 * 3 * 4, at::kFloat).reshape({2, 3, 4});
  for (const at::Tensor& t : {base.transpose(0, 2), base.select(1, 1), base.slice(2, 0, 4, 3), base[1][2]}) {
    const tensor_view v = from_tensor(t);
    at::Tensor got = at::empty(t.sizes(), t.options());
    gather_contiguous(v, got.data_ptr());
    CHECK(same_bits(got, t.contiguous()));
  }
}
