#include "fold/native_kernels.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "util/version.h"

namespace swavg {
namespace {

using c10::BFloat16;
using c10::Half;

// Inputs come as bytes: a tensor read in place from a file (a DCP chunk inside its .distcp) need
// not be aligned to its element size, so element i is loaded with memcpy (an unaligned load).
using bytes_t = unsigned char;

// Element i of an array of T starting at p.
template <typename T>
const bytes_t* element(const void* p, int64_t i) {
  return static_cast<const bytes_t*>(p) + i * static_cast<int64_t>(sizeof(T));
}

template <typename T>
inline T load_at(const bytes_t* p, int64_t i) {
  T v;
  std::memcpy(&v, element<T>(p, i), sizeof(T));
  return v;
}

template <typename acc_t, typename in_t>
inline void swa_loop(acc_t* __restrict acc, const bytes_t* __restrict x, int64_t n, acc_t divisor) {
  for (int64_t i = 0; i < n; ++i) {
    const acc_t a = acc[i];
    const acc_t diff = static_cast<acc_t>(load_at<in_t>(x, i)) - a;
    acc[i] = a + diff / divisor;
  }
}

template <typename acc_t, typename in_t>
inline void lerp_loop(acc_t* __restrict acc, const bytes_t* __restrict x, int64_t n, acc_t weight, lerp_form form) {
  if (std::abs(weight) < acc_t(0.5)) {
    for (int64_t i = 0; i < n; ++i) {
      const acc_t a = acc[i];
      acc[i] = std::fma(weight, static_cast<acc_t>(load_at<in_t>(x, i)) - a, a);
    }
    return;
  }
  const acc_t coeff = form == lerp_form::one_minus_w ? -(acc_t(1) - weight) : weight - acc_t(1);
  for (int64_t i = 0; i < n; ++i) {
    const acc_t v = static_cast<acc_t>(load_at<in_t>(x, i));
    acc[i] = std::fma(coeff, v - acc[i], v);
  }
}

template <typename to_t, typename from_t>
inline void convert_loop(to_t* __restrict dst, const bytes_t* __restrict src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<to_t>(load_at<from_t>(src, i));
}

// Values whose exponent bits are all ones (Inf and NaN), for an IEEE layout with that exponent mask.
template <typename bits_t, bits_t kExponent>
inline int64_t nonfinite_bits(const bits_t* bits, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += (bits[i] & kExponent) == kExponent;
  return bad;
}
constexpr auto nonfinite_f64 = nonfinite_bits<uint64_t, 0x7ff0000000000000ull>;
constexpr auto nonfinite_f32 = nonfinite_bits<uint32_t, 0x7f800000u>;
constexpr auto nonfinite_f16 = nonfinite_bits<uint16_t, 0x7c00u>;
constexpr auto nonfinite_bf16 = nonfinite_bits<uint16_t, 0x7f80u>;

#if defined(__x86_64__) && defined(__GNUC__)
#define SWAVG_AVX2_CLONES 1
template <typename acc_t, typename in_t>
__attribute__((target("avx2,fma"))) void swa_loop_avx2(acc_t* __restrict acc, const bytes_t* __restrict x, int64_t n,
                                                       acc_t divisor) {
  swa_loop<acc_t, in_t>(acc, x, n, divisor);
}
template <typename acc_t, typename in_t>
__attribute__((target("avx2,fma"))) void lerp_loop_avx2(acc_t* __restrict acc, const bytes_t* __restrict x, int64_t n,
                                                        acc_t weight, lerp_form form) {
  lerp_loop<acc_t, in_t>(acc, x, n, weight, form);
}
template <typename to_t, typename from_t>
__attribute__((target("avx2,fma"))) void convert_loop_avx2(to_t* __restrict dst, const bytes_t* __restrict src,
                                                           int64_t n) {
  convert_loop<to_t, from_t>(dst, src, n);
}
#endif

// Runs f(begin, end) over [0, n) split among OpenMP's threads (each element is computed alone, so
// the split changes no bit), or in one piece when n is too small to be worth it.
template <typename fn>
void split_range(int64_t n, fn&& f) {
  constexpr int64_t kParallelMin = 1 << 16;
#ifdef _OPENMP
  if (n >= kParallelMin && omp_get_max_threads() > 1) {
#pragma omp parallel
    {
      const int64_t t = omp_get_thread_num(), k = omp_get_num_threads();
      f(n * t / k, n * (t + 1) / k);
    }
    return;
  }
#endif
  f(int64_t{0}, n);
}

template <typename acc_t, typename in_t>
void swa(acc_t* acc, const void* x, int64_t n, acc_t divisor) {
  split_range(n, [&](int64_t b, int64_t e) {
#ifdef SWAVG_AVX2_CLONES
    if (cpu_has_avx2_fma()) return swa_loop_avx2<acc_t, in_t>(acc + b, element<in_t>(x, b), e - b, divisor);
#endif
    swa_loop<acc_t, in_t>(acc + b, element<in_t>(x, b), e - b, divisor);
  });
}

template <typename acc_t, typename in_t>
void lerp(acc_t* acc, const void* x, int64_t n, acc_t weight, lerp_form form) {
  split_range(n, [&](int64_t b, int64_t e) {
#ifdef SWAVG_AVX2_CLONES
    if (cpu_has_avx2_fma()) return lerp_loop_avx2<acc_t, in_t>(acc + b, element<in_t>(x, b), e - b, weight, form);
#endif
    lerp_loop<acc_t, in_t>(acc + b, element<in_t>(x, b), e - b, weight, form);
  });
}

template <typename to_t, typename from_t>
void convert(void* dst, const void* src, int64_t n) {
  to_t* d = static_cast<to_t*>(dst);
  split_range(n, [&](int64_t b, int64_t e) {
#ifdef SWAVG_AVX2_CLONES
    if (cpu_has_avx2_fma()) return convert_loop_avx2<to_t, from_t>(d + b, element<from_t>(src, b), e - b);
#endif
    convert_loop<to_t, from_t>(d + b, element<from_t>(src, b), e - b);
  });
}

template <typename T>
struct type_tag {
  using type = T;
};

// Calls f(type_tag<x's element type>) for the floating input dtypes.
template <typename fn>
bool with_float_input(dtype t, fn&& f) {
  switch (t) {
    case dtype::float32: f(type_tag<float>{}); return true;
    case dtype::float64: f(type_tag<double>{}); return true;
    case dtype::float16: f(type_tag<Half>{}); return true;
    case dtype::bfloat16: f(type_tag<BFloat16>{}); return true;
    default: return false;
  }
}

template <typename to_t>
bool convert_from(dtype from, const void* src, void* dst, int64_t n) {
  switch (from) {
    case dtype::float32: convert<to_t, float>(dst, src, n); return true;
    case dtype::float64: convert<to_t, double>(dst, src, n); return true;
    case dtype::float16: convert<to_t, Half>(dst, src, n); return true;
    case dtype::bfloat16: convert<to_t, BFloat16>(dst, src, n); return true;
    default: return false;
  }
}

}  // namespace

bool cpu_has_avx2_fma() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

// Verified for LibTorch 1.13 (tests/test_native_kernels.cpp). Other versions are left to
// swavg-torch, which probes the lerp of the LibTorch it loads.
std::optional<lerp_form> built_lerp_form() {
#if SWAVG_LIBTORCH_VERSION_MAJOR == 1
  return lerp_form::one_minus_w;
#else
  return std::nullopt;
#endif
}

bool native_swa_step(dtype acc_type, void* acc, dtype x_type, const void* x, int64_t n, int64_t divisor) {
  if (acc_type == dtype::float32 && x_type != dtype::float64) {
    float* a = static_cast<float*>(acc);
    const float d = static_cast<float>(divisor);
    return with_float_input(x_type, [&](auto in) { swa<float, typename decltype(in)::type>(a, x, n, d); });
  }
  if (acc_type == dtype::float64) {
    double* a = static_cast<double*>(acc);
    const double d = static_cast<double>(divisor);
    return with_float_input(x_type, [&](auto in) { swa<double, typename decltype(in)::type>(a, x, n, d); });
  }
  return false;
}

bool native_lerp_step(dtype acc_type, void* acc, dtype x_type, const void* x, int64_t n, double weight,
                      lerp_form form) {
  if (acc_type == dtype::float32) {
    float* a = static_cast<float*>(acc);
    const float w = static_cast<float>(weight);
    return with_float_input(x_type, [&](auto in) { lerp<float, typename decltype(in)::type>(a, x, n, w, form); });
  }
  if (acc_type == dtype::float64) {
    double* a = static_cast<double*>(acc);
    return with_float_input(x_type, [&](auto in) { lerp<double, typename decltype(in)::type>(a, x, n, weight, form); });
  }
  return false;
}

bool native_convert(dtype from, const void* src, dtype to, void* dst, int64_t n) {
  if (from == to) {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * itemsize(from));
    return true;
  }
  switch (to) {
    case dtype::float32: return convert_from<float>(from, src, dst, n);
    case dtype::float64: return convert_from<double>(from, src, dst, n);
    case dtype::float16: return convert_from<Half>(from, src, dst, n);
    case dtype::bfloat16: return convert_from<BFloat16>(from, src, dst, n);
    default: return false;
  }
}

int64_t count_nonfinite(dtype t, const void* data, int64_t n) {
  switch (t) {
    case dtype::float32: return nonfinite_f32(static_cast<const uint32_t*>(data), n);
    case dtype::float64: return nonfinite_f64(static_cast<const uint64_t*>(data), n);
    case dtype::float16: return nonfinite_f16(static_cast<const uint16_t*>(data), n);
    case dtype::bfloat16: return nonfinite_bf16(static_cast<const uint16_t*>(data), n);
    case dtype::complex64: {  // a value counts once, however many of its parts are bad
      const uint32_t* p = static_cast<const uint32_t*>(data);
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) bad += nonfinite_f32(p + 2 * i, 2) > 0;
      return bad;
    }
    case dtype::complex128: {
      const uint64_t* p = static_cast<const uint64_t*>(data);
      int64_t bad = 0;
      for (int64_t i = 0; i < n; ++i) bad += nonfinite_f64(p + 2 * i, 2) > 0;
      return bad;
    }
    default: return 0;
  }
}

}  // namespace swavg
