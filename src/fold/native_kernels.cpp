#include "fold/native_kernels.h"

#include <cmath>
#include <cstring>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "util/version.h"

namespace swavg {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// float16 and bfloat16 as c10's Half and BFloat16 convert on the CPU (c10/util/Half.h's
// fp16_ieee_to_fp32_value and fp16_ieee_from_fp32_value, BFloat16.h's round_to_nearest_even, in
// LibTorch 1.13 and 2.14 alike), written out here so that swavg builds without LibTorch's headers:
// to float32 exactly; from float32 rounding to nearest even, a NaN becoming the quiet NaN with the
// sign kept (float16) or the positive one (bfloat16).
float half_to_float(uint16_t h) {
  const uint32_t w = static_cast<uint32_t>(h) << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;
  constexpr uint32_t kExpOffset = UINT32_C(0xE0) << 23;
  const float exp_scale = float_of(UINT32_C(15) << 23);  // 2^-112
  const float normalized = float_of((two_w >> 4) + kExpOffset) * exp_scale;
  constexpr uint32_t kMagicMask = UINT32_C(126) << 23;
  const float denormalized = float_of((two_w >> 17) | kMagicMask) - 0.5f;
  constexpr uint32_t kDenormalizedCutoff = UINT32_C(1) << 27;
  return float_of(sign | (two_w < kDenormalizedCutoff ? bits_of(denormalized) : bits_of(normalized)));
}

uint16_t half_from_float(float f) {
  const float scale_to_inf = float_of(UINT32_C(239) << 23);  // 2^112
  const float scale_to_zero = float_of(UINT32_C(17) << 23);  // 2^-110
  float base = (std::fabs(f) * scale_to_inf) * scale_to_zero;
  const uint32_t w = bits_of(f);
  const uint32_t shl1_w = w + w;
  const uint32_t sign = w & 0x80000000u;
  uint32_t bias = shl1_w & 0xFF000000u;
  if (bias < 0x71000000u) bias = 0x71000000u;
  base = float_of((bias >> 1) + 0x07800000u) + base;
  const uint32_t bits = bits_of(base);
  const uint32_t nonsign = ((bits >> 13) & 0x00007C00u) + (bits & 0x00000FFFu);
  return static_cast<uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

float bfloat16_to_float(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

uint16_t bfloat16_from_float(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t u = bits_of(f);
  return static_cast<uint16_t>((u + ((u >> 16) & 1) + 0x7FFFu) >> 16);
}

// The 8-bit floats' conversions, as c10 computes them (torch 2.14's
// torch/headeronly/util/Float8_*.h, written out again here because Debian's LibTorch 1.13 has no
// such header): to float32 exactly, from float32 rounding to nearest even. Out of range,
// float8_e4m3fn saturates to +-448, float8_e5m2 goes to +-Inf, the fnuz types to their one NaN
// (0x80); float8_e8m0fnu keeps a power of two (the exponent, rounded on the mantissa's top bits).
float e4m3fn_to_float(uint8_t x) {
  const uint32_t w = static_cast<uint32_t>(x) << 24;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t nonsign = w & 0x7FFFFFFFu;
  uint32_t renorm = nonsign != 0 ? static_cast<uint32_t>(__builtin_clz(nonsign)) : 32;
  renorm = renorm > 4 ? renorm - 4 : 0;
  const int32_t inf_nan_mask = (static_cast<int32_t>(nonsign + 0x01000000) >> 8) & INT32_C(0x7F800000);
  const int32_t zero_mask = static_cast<int32_t>(nonsign - 1) >> 31;
  return float_of(sign | ((((nonsign << renorm >> 4) + ((0x78 - renorm) << 23)) | static_cast<uint32_t>(inf_nan_mask)) &
                          ~static_cast<uint32_t>(zero_mask)));
}

uint8_t e4m3fn_from_float(float f) {
  constexpr uint32_t kMax = UINT32_C(1087) << 20;
  constexpr uint32_t kDenorm = UINT32_C(141) << 23;
  uint32_t b = bits_of(f);
  const uint32_t sign = b & 0x80000000u;
  b ^= sign;
  uint8_t r;
  if (b >= kMax) {
    r = b > 0x7F800000u ? 0x7f : 0x7e;
  } else if (b < (UINT32_C(121) << 23)) {
    r = static_cast<uint8_t>(bits_of(float_of(b) + float_of(kDenorm)) - kDenorm);
  } else {
    const uint32_t odd = (b >> 20) & 1;
    b += (static_cast<uint32_t>(7 - 127) << 23) + 0x7FFFF;
    b += odd;
    r = static_cast<uint8_t>(b >> 20);
    if (r == 0x7f) r = 0x7e;
  }
  return static_cast<uint8_t>(r | (sign >> 24));
}

float e5m2_to_float(uint8_t x) { return half_to_float(static_cast<uint16_t>(x << 8)); }

uint8_t e5m2_from_float(float f) {
  constexpr uint32_t kInf = UINT32_C(255) << 23;
  constexpr uint32_t kMax = UINT32_C(143) << 23;
  constexpr uint32_t kDenorm = UINT32_C(134) << 23;
  uint32_t b = bits_of(f);
  const uint32_t sign = b & 0x80000000u;
  b ^= sign;
  uint8_t r;
  if (b >= kMax) {
    r = b > kInf ? 0x7F : 0x7C;
  } else if (b < (UINT32_C(113) << 23)) {
    r = static_cast<uint8_t>(bits_of(float_of(b) + float_of(kDenorm)) - kDenorm);
  } else {
    const uint32_t odd = (b >> 21) & 1;
    b += (static_cast<uint32_t>(15 - 127) << 23) + 0xFFFFF;
    b += odd;
    r = static_cast<uint8_t>(b >> 21);
  }
  return static_cast<uint8_t>(r | (sign >> 24));
}

// float8_e4m3fnuz (kExp 4, kMant 3) and float8_e5m2fnuz (5, 2).
template <uint32_t kExp, uint32_t kMant>
float fnuz_to_float(uint8_t x) {
  if (x == 0) return 0.0f;
  if (x == 0x80) return float_of(0x7F800001u);
  uint32_t mantissa = x & ((1u << kMant) - 1);
  uint32_t exponent = (x & 0x7Fu) >> kMant;
  if (exponent == 0) {
    const uint32_t renorm = static_cast<uint32_t>(__builtin_clz(mantissa));
    const uint32_t sh = 1 + renorm - (32 - kMant);
    mantissa <<= sh;
    exponent += 1 - sh;
    mantissa &= (1u << kMant) - 1;
  }
  exponent += (1u << 7) - (1u << (kExp - 1)) - 1;
  mantissa <<= 23 - kMant;
  return float_of((static_cast<uint32_t>(x >> 7) << 31) | (exponent << 23) | mantissa);
}

// kMaxExp: the float32 exponent at and past which the value is out of range; kDenormExp: the
// magic exponent that rounds the small values into denormals; kNormalExp: where normals start.
template <uint32_t kExp, uint32_t kMant, uint32_t kMaxExp, uint32_t kDenormExp, uint32_t kNormalExp>
uint8_t fnuz_from_float(float f) {
  constexpr uint32_t kMax = kMaxExp << 23;
  constexpr uint32_t kDenorm = kDenormExp << 23;
  constexpr uint32_t kShift = 23 - kMant;
  uint32_t b = bits_of(f);
  const uint32_t sign = b & 0x80000000u;
  b ^= sign;
  if (b >= kMax) return 0x80;
  uint32_t r;
  if (b < (kNormalExp << 23)) {
    r = static_cast<uint8_t>(bits_of(float_of(b) + float_of(kDenorm)) - kDenorm);
    if (r == 0) return 0;
  } else {
    const uint32_t odd = (b >> kShift) & 1;
    b += ((static_cast<uint32_t>(1u << (kExp - 1)) - 127) << 23) + ((1u << (kShift - 1)) - 1);
    b += odd;
    r = static_cast<uint8_t>(b >> kShift);
  }
  return static_cast<uint8_t>(r | (sign >> 24));
}

uint8_t e4m3fnuz_from_float(float f) { return fnuz_from_float<4, 3, 0x87, 0x8C, 0x78>(f); }
uint8_t e5m2fnuz_from_float(float f) { return fnuz_from_float<5, 2, 0x8F, 0x85, 0x70>(f); }

float e8m0fnu_to_float(uint8_t x) {
  if (x == 0) return float_of(0x00400000u);
  if (x == 0xFF) return float_of(0x7f800001u);
  return float_of(static_cast<uint32_t>(x) << 23);
}

uint8_t e8m0fnu_from_float(float f) {
  const uint32_t b = bits_of(f);
  uint32_t exponent = (b >> 23) & 0xFF;
  if (exponent == 0xFF) return 0xFF;
  const bool guard = (b & 0x400000) != 0, round = (b & 0x200000) != 0, sticky = (b & 0x1FFFFF) != 0;
  if (guard && (round || sticky || exponent > 0)) ++exponent;
  return static_cast<uint8_t>(exponent);
}

// A 16-bit or 8-bit float element: converts as c10's Half, BFloat16 and Float8 types do (from
// anything through float32, to float32 exactly).
template <typename bits_t, bits_t (*kFrom)(float), float (*kTo)(bits_t)>
struct small_float {
  bits_t x;
  small_float() = default;
  explicit small_float(float f) : x(kFrom(f)) {}
  template <typename T>
  explicit small_float(T v) : small_float(static_cast<float>(v)) {}
  operator float() const { return kTo(x); }
};

using f16 = small_float<uint16_t, half_from_float, half_to_float>;
using bf16 = small_float<uint16_t, bfloat16_from_float, bfloat16_to_float>;
using e4m3fn = small_float<uint8_t, e4m3fn_from_float, e4m3fn_to_float>;
using e5m2 = small_float<uint8_t, e5m2_from_float, e5m2_to_float>;
using e4m3fnuz = small_float<uint8_t, e4m3fnuz_from_float, fnuz_to_float<4, 3>>;
using e5m2fnuz = small_float<uint8_t, e5m2fnuz_from_float, fnuz_to_float<5, 2>>;
using e8m0fnu = small_float<uint8_t, e8m0fnu_from_float, e8m0fnu_to_float>;

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

// The 8-bit floats' NaN (and Inf) encodings, by predicate.
template <typename pred>
inline int64_t count_bytes(const void* data, int64_t n, pred is_bad) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += is_bad(p[i]);
  return bad;
}

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
    case dtype::float16: f(type_tag<f16>{}); return true;
    case dtype::bfloat16: f(type_tag<bf16>{}); return true;
    case dtype::float8_e4m3fn: f(type_tag<e4m3fn>{}); return true;
    case dtype::float8_e5m2: f(type_tag<e5m2>{}); return true;
    case dtype::float8_e4m3fnuz: f(type_tag<e4m3fnuz>{}); return true;
    case dtype::float8_e5m2fnuz: f(type_tag<e5m2fnuz>{}); return true;
    case dtype::float8_e8m0fnu: f(type_tag<e8m0fnu>{}); return true;
    default: return false;
  }
}

template <typename to_t>
bool convert_from(dtype from, const void* src, void* dst, int64_t n) {
  return with_float_input(from, [&](auto in) { convert<to_t, typename decltype(in)::type>(dst, src, n); });
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

// Verified for LibTorch 1.13 and 2.14 (tests/test_native_kernels.cpp, on both builds); a build
// without LibTorch computes 2.14's, the reference. Other major versions are left to swavg-torch,
// which probes the lerp of the LibTorch it loads.
std::optional<lerp_form> built_lerp_form() {
#if SWAVG_LIBTORCH_VERSION_MAJOR == 1
  return lerp_form::one_minus_w;
#elif SWAVG_LIBTORCH_VERSION_MAJOR == 2 || SWAVG_LIBTORCH_VERSION_MAJOR == 0  // 0: built without LibTorch
  return lerp_form::w_minus_one;
#else
  return std::nullopt;
#endif
}

bool native_lerp_reproduces(dtype acc_type, lerp_form form, double weight) {
  if (form != lerp_form::w_minus_one) return true;
  return acc_type == dtype::float32 ? static_cast<float>(weight) != 1.0f : weight != 1.0;
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
    case dtype::float16: return convert_from<f16>(from, src, dst, n);
    case dtype::bfloat16: return convert_from<bf16>(from, src, dst, n);
    case dtype::float8_e4m3fn: return convert_from<e4m3fn>(from, src, dst, n);
    case dtype::float8_e5m2: return convert_from<e5m2>(from, src, dst, n);
    case dtype::float8_e4m3fnuz: return convert_from<e4m3fnuz>(from, src, dst, n);
    case dtype::float8_e5m2fnuz: return convert_from<e5m2fnuz>(from, src, dst, n);
    case dtype::float8_e8m0fnu: return convert_from<e8m0fnu>(from, src, dst, n);
    default: return false;
  }
}

int64_t count_nonfinite(dtype t, const void* data, int64_t n) {
  switch (t) {
    case dtype::float32: return nonfinite_f32(static_cast<const uint32_t*>(data), n);
    case dtype::float64: return nonfinite_f64(static_cast<const uint64_t*>(data), n);
    case dtype::float16: return nonfinite_f16(static_cast<const uint16_t*>(data), n);
    case dtype::bfloat16: return nonfinite_bf16(static_cast<const uint16_t*>(data), n);
    case dtype::float8_e4m3fn: return count_bytes(data, n, [](uint8_t x) { return (x & 0x7F) == 0x7F; });
    case dtype::float8_e5m2: return count_bytes(data, n, [](uint8_t x) { return (x & 0x7C) == 0x7C; });
    case dtype::float8_e4m3fnuz:
    case dtype::float8_e5m2fnuz: return count_bytes(data, n, [](uint8_t x) { return x == 0x80; });
    case dtype::float8_e8m0fnu: return count_bytes(data, n, [](uint8_t x) { return x == 0xFF; });
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
