#include "fold/int_average.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "fold/schedule.h"
#include "util/error.h"

namespace swavg {
namespace {

// float32 to a signed T as `Tensor.copy_` converts on x86-64: truncation; int64 out of range (and
// NaN) is INT64_MIN (cvttss2si's answer), and the narrow types go through int64 and wrap.
template <typename T>
T from_float(float f) {
  constexpr float kTwo63 = 9223372036854775808.0f;
  const int64_t wide = (f >= -kTwo63 && f < kTwo63) ? static_cast<int64_t>(f) : INT64_MIN;
  return static_cast<T>(wide);
}

// cvttss2si into a signed integer of I's width: truncation, and I's minimum out of range or NaN.
template <typename I>
I truncate_to(float f) {
  constexpr float kLimit = static_cast<float>(uint64_t{1} << (8 * sizeof(I) - 1));
  return (f >= -kLimit && f < kLimit) ? static_cast<I>(f) : std::numeric_limits<I>::min();
}

// float32 to the unsigned types as torch 2.14's `Tensor.copy_` converts on x86-64 (c10 casts them
// directly, which GCC compiles so; measured, scalar and vector paths alike): uint16 through a
// 32-bit truncation, keeping its low bits; uint32 and uint64 truncated as unsigned, a value at
// or past 2^(bits-1) offset by it first, so that out of range gives the low bits of
// INT_MIN ^ INT_MIN and NaN INT_MIN's.
template <>
uint16_t from_float<uint16_t>(float f) {
  return static_cast<uint16_t>(static_cast<uint32_t>(truncate_to<int32_t>(f)));
}

template <typename U, typename I>
U unsigned_from_float(float f) {
  constexpr float kHalf = static_cast<float>(uint64_t{1} << (8 * sizeof(U) - 1));
  constexpr U kTop = U{1} << (8 * sizeof(U) - 1);
  if (f >= kHalf) return static_cast<U>(static_cast<U>(truncate_to<I>(f - kHalf)) ^ kTop);
  return static_cast<U>(truncate_to<I>(f));
}

template <>
uint32_t from_float<uint32_t>(float f) {
  return unsigned_from_float<uint32_t, int32_t>(f);
}

template <>
uint64_t from_float<uint64_t>(float f) {
  return unsigned_from_float<uint64_t, int64_t>(f);
}

// x - avg in T, wrapping as PyTorch's integer subtraction does.
template <typename T>
T wrapping_sub(T x, T avg) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(x) - static_cast<U>(avg)));
}

template <typename T>
void swa_step(T* acc, const T* x, int64_t n, int64_t folded) {
  const float divisor = static_cast<float>(folded + 1);
  for (int64_t i = 0; i < n; ++i) {
    const float q = static_cast<float>(wrapping_sub(x[i], acc[i])) / divisor;
    acc[i] = from_float<T>(static_cast<float>(acc[i]) + q);
  }
}

template <typename T>
void ema_step(T* acc, const T* x, int64_t n, double decay) {
  const float d = static_cast<float>(decay);
  const float w = static_cast<float>(1.0 - decay);
  for (int64_t i = 0; i < n; ++i) {
    const float a = static_cast<float>(acc[i]) * d;
    const float b = static_cast<float>(x[i]) * w;
    acc[i] = from_float<T>(a + b);
  }
}

template <typename F>
void dispatch(dtype t, F&& f) {
  switch (t) {
    case dtype::int64: f(int64_t{}); return;
    case dtype::int32: f(int32_t{}); return;
    case dtype::int16: f(int16_t{}); return;
    case dtype::int8: f(int8_t{}); return;
    case dtype::uint8: f(uint8_t{}); return;
    case dtype::uint16: f(uint16_t{}); return;
    case dtype::uint32: f(uint32_t{}); return;
    case dtype::uint64: f(uint64_t{}); return;
    default: throw std::logic_error(fmt::format("no integer average for dtype {}", dtype_name(t)));
  }
}

}  // namespace

bool is_integer_average(const tensor_plan& p) {
  const dtype t = p.outcome.input_type;
  return p.outcome.action == tensor_action::average && !is_floating(t) && !is_complex(t) && !is_packed(t);
}

void integer_swa_step(dtype t, void* acc, const void* x, int64_t n, int64_t folded) {
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    swa_step(static_cast<T*>(acc), static_cast<const T*>(x), n, folded);
  });
}

void integer_ema_step(dtype t, void* acc, const void* x, int64_t n, double decay) {
  dispatch(t, [&](auto tag) {
    using T = decltype(tag);
    ema_step(static_cast<T*>(acc), static_cast<const T*>(x), n, decay);
  });
}

void integer_average(const fold_config& c, const tensor_plan& p, const chunk_writer& write) {
  const dtype t = p.outcome.input_type;
  if (p.resumed && p.resumed->type != t)
    throw mismatch_error(fmt::format("tensor '{}': the resumed average holds {} but the inputs {}", p.name,
                                     dtype_name(p.resumed->type), dtype_name(t)));
  const size_t item = itemsize(t);
  std::vector<std::vector<uint8_t>> copies(p.sources.size());
  std::vector<const uint8_t*> data;
  for (size_t j = 0; j < p.sources.size(); ++j) data.push_back(contiguous_data(*p.sources[j].view, copies[j]));
  std::vector<uint8_t> resumed_copy;
  const uint8_t* resumed = p.resumed ? contiguous_data(*p.resumed, resumed_copy) : nullptr;
  const int64_t numel = p.sources.empty() ? p.resumed->numel() : p.sources.front().view->numel();
  const int64_t chunk = std::min<int64_t>(kFoldChunkElements, std::max<int64_t>(numel, 1));
  std::vector<uint8_t> acc(static_cast<size_t>(chunk) * item);

  for (int64_t begin = 0; begin < numel; begin += chunk) {
    const int64_t length = std::min(chunk, numel - begin);
    const size_t offset = static_cast<size_t>(begin) * item;
    const size_t bytes = static_cast<size_t>(length) * item;
    int64_t k = 0;
    if (resumed) {
      std::copy_n(resumed + offset, bytes, acc.data());
      k = p.resumed_count;
    }
    for (size_t j = 0; j < data.size(); ++j) {
      const uint8_t* x = data[j];
      if (k == 0)
        std::copy_n(x + offset, bytes, acc.data());
      else if (c.mode == fold_mode::swa)
        integer_swa_step(t, acc.data(), x + offset, length, k);
      else if (c.mode == fold_mode::ema)
        integer_ema_step(t, acc.data(), x + offset, length, ema_decay_for(c, p.rule_decay, p.sources[j].input, k));
      else
        throw std::logic_error(fmt::format("tensor '{}': integer averages are for SWA and EMA", p.name));
      ++k;
    }
    write(acc.data(), bytes);
  }
}

}  // namespace swavg
