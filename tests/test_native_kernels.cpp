// swavg's own kernels against ATen's (the ones torch.optim.swa_utils and Tensor.to run on CPU), from
// aligned and misaligned inputs.
#include <ATen/Functions.h>
#include <catch2/catch.hpp>

#include <torch/version.h>

#include <cstring>
#include <limits>
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
        for (double w : {1e-4, 0.001, 0.25, 0.5, 0.75, 0.9999, 1.0 - 0x1p-24, 1.0 - 0x1p-53, 1.0}) {
          if (!native_lerp_reproduces(acc, *form, w)) continue;
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

TEST_CASE("the weights the lerp kernel leaves to ATen: 2.x's at exactly 1, where its lanes and tails differ",
          "[native_kernels]") {
  // The last weight below 1 in each accumulator's dtype is reproduced (the lerp test above); 1 is not.
  CHECK(native_lerp_reproduces(dtype::float32, lerp_form::w_minus_one, 1.0 - 0x1p-24));
  CHECK_FALSE(native_lerp_reproduces(dtype::float32, lerp_form::w_minus_one, 1.0 - 0x1p-26));  // 1 as a float
  CHECK_FALSE(native_lerp_reproduces(dtype::float32, lerp_form::w_minus_one, 1.0));
  CHECK(native_lerp_reproduces(dtype::float64, lerp_form::w_minus_one, 1.0 - 0x1p-53));
  CHECK_FALSE(native_lerp_reproduces(dtype::float64, lerp_form::w_minus_one, 1.0));
  CHECK(native_lerp_reproduces(dtype::float32, lerp_form::one_minus_w, 1.0));
  CHECK(native_lerp_reproduces(dtype::float64, lerp_form::one_minus_w, 1.0));
#if defined(__x86_64__)
  if (!cpu_has_avx2_fma() || lerp_form_for(dtype::float32, dtype::float32) != lerp_form::w_minus_one) return;
  // Why: ATen 2.x lerps x = -0 at weight 1 to +0 in its vector lanes and to -0 in its scalar tail
  // (avg > 0), so the sign of a zero depends on where the element falls, which no elementwise kernel
  // can know. Were this to stop holding, the rule would be needlessly strict, and this test says so.
  for (at::ScalarType type : {at::kFloat, at::kDouble}) {
    const int64_t n = 1001;  // one vector body, a tail after it
    at::Tensor avg = at::ones({n}, type), x = at::full({n}, -0.0, type);
    avg.lerp_(x, 1.0);
    const at::Tensor negative = at::signbit(avg);
    CHECK(negative.any().item<bool>());
    CHECK_FALSE(negative.all().item<bool>());
  }
#endif
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

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
namespace {

const dtype kFloat8s[] = {dtype::float8_e4m3fn, dtype::float8_e5m2, dtype::float8_e4m3fnuz, dtype::float8_e5m2fnuz,
                          dtype::float8_e8m0fnu};

// Every class of float32 bit pattern the 8-bit conversions round: all sign, exponent and top seven
// mantissa bits, each with the low bits zero (ties), one, 0x8000 and 0xffff (around the ties), so
// Inf, NaN, denormals and the saturation edges of every 8-bit type are in.
at::Tensor float32_patterns() {
  std::vector<uint32_t> bits;
  for (uint32_t hi = 0; hi < (1u << 16); ++hi)
    for (uint32_t lo : {0u, 1u, 0x8000u, 0xffffu}) bits.push_back(hi << 16 | lo);
  return at::from_blob(bits.data(), {static_cast<int64_t>(bits.size())}, at::kInt).clone().view(at::kFloat);
}

// The 256 values of an 8-bit type.
at::Tensor every_byte(dtype t) { return at::arange(0, 256, at::kInt).to(at::kByte).view(to_scalar_type(t)); }

}  // namespace

TEST_CASE("16-bit float conversions equal Tensor.to: every 16-bit pattern, every float32 pattern class",
          "[native_kernels]") {
  const at::Tensor every16 = at::arange(0, 1 << 16, at::kInt).to(at::kShort);
  for (dtype t : {dtype::float16, dtype::bfloat16}) {
    INFO(dtype_name(t));
    const at::Tensor src = every16.view(to_scalar_type(t));
    for (dtype to : {dtype::float32, dtype::float64}) {
      const at::Tensor expected = src.to(to_scalar_type(to));
      at::Tensor got = at::empty_like(expected);
      INFO("to " << dtype_name(to));
      REQUIRE(native_convert(t, src.data_ptr(), to, got.data_ptr(), src.numel()));
      CHECK(same_bits(got, expected));
    }
    // Narrowing: rounding ties, subnormals, overflow to Inf. A NaN keeps its payload in ATen's
    // vector path (F16C) and not in c10's scalar one, which swavg follows: NaNs are checked apart.
    const at::Tensor f32 = float32_patterns();
    const at::Tensor numbers = f32.masked_select(at::logical_not(at::isnan(f32)));
    const at::Tensor expected = numbers.to(to_scalar_type(t));
    at::Tensor got = at::empty_like(expected);
    REQUIRE(native_convert(dtype::float32, numbers.data_ptr(), t, got.data_ptr(), numbers.numel()));
    CHECK(same_bits(got, expected));
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float nans[2] = {nan, -nan};
    uint16_t out[2];
    REQUIRE(native_convert(dtype::float32, nans, t, out, 2));
    CHECK(out[0] == (t == dtype::float16 ? 0x7E00 : 0x7FC0));  // c10's quiet NaN
    CHECK(out[1] == (t == dtype::float16 ? 0xFE00 : 0x7FC0));  // float16 keeps the sign, bfloat16 does not
  }
}

TEST_CASE("8-bit float conversions equal Tensor.to, from every float32 pattern class", "[native_kernels]") {
  const at::Tensor f32 = float32_patterns();
  for (dtype t : kFloat8s) {
    INFO(dtype_name(t));
    for (const at::Tensor& src :
         {f32, awkward(100003, at::kDouble, 7), awkward(100003, at::kHalf, 8), awkward(100003, at::kBFloat16, 9)}) {
      const at::Tensor expected = src.to(to_scalar_type(t));
      at::Tensor got = at::empty_like(expected);
      const dtype from = from_scalar_type(src.scalar_type(), "source");
      INFO("from " << dtype_name(from));
      REQUIRE(native_convert(from, src.data_ptr(), t, got.data_ptr(), src.numel()));
      CHECK(same_bits(got, expected));
    }
    const at::Tensor bytes = every_byte(t);
    // ATen's vector path keeps a NaN's payload into float16 (F16C), c10's scalar one does not:
    // the 16-bit targets are checked on the values that are not NaN.
    const at::Tensor u8 = bytes.view(at::kByte);
    const at::Tensor numbers =
        u8.masked_select(at::logical_not(at::isnan(bytes.to(at::kFloat)))).view(to_scalar_type(t));
    for (dtype to : kFloats) {
      const at::Tensor& src = itemsize(to) == 2 ? numbers : bytes;
      const at::Tensor expected = src.to(to_scalar_type(to));
      at::Tensor got = at::empty_like(expected);
      INFO("to " << dtype_name(to));
      REQUIRE(native_convert(t, src.data_ptr(), to, got.data_ptr(), src.numel()));
      CHECK(same_bits(got, expected));
    }
    CHECK(count_nonfinite(t, bytes.data_ptr(), 256) ==
          at::logical_not(at::isfinite(bytes.to(at::kFloat))).sum().item<int64_t>());
  }
}

TEST_CASE("8-bit float inputs fold as their float32 values do", "[native_kernels]") {
  for (dtype t : kFloat8s) {
    const at::Tensor x = awkward(65, at::kFloat, 10).to(to_scalar_type(t));
    const at::Tensor x32 = x.to(at::kFloat);
    for (dtype acc : {dtype::float32, dtype::float64}) {
      INFO(dtype_name(t) << " into " << dtype_name(acc));
      const at::Tensor start = awkward(65, to_scalar_type(acc), 11);
      at::Tensor expected = start.clone();
      REQUIRE(native_swa_step(acc, expected.data_ptr(), dtype::float32, x32.data_ptr(), 65, 3));
      at::Tensor got = start.clone();
      REQUIRE(native_swa_step(acc, got.data_ptr(), t, misaligned(x).data(), 65, 3));
      CHECK(same_bits(got, expected));
      for (lerp_form form : {lerp_form::one_minus_w, lerp_form::w_minus_one}) {
        at::Tensor want = start.clone();
        REQUIRE(native_lerp_step(acc, want.data_ptr(), dtype::float32, x32.data_ptr(), 65, 0.7, form));
        at::Tensor have = start.clone();
        REQUIRE(native_lerp_step(acc, have.data_ptr(), t, x.data_ptr(), 65, 0.7, form));
        CHECK(same_bits(have, want));
      }
    }
  }
}
#endif
