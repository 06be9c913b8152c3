// Integer averages (fold/int_average.h) against the arithmetic AveragedModel(use_buffers=True) runs
// on integer tensors, written out again here: x - avg in the integer dtype (wrapping), the true
// division and the add in float32 (SWA), or the two float32 products and their sum (EMA), then the
// float32 result copied back by truncation toward zero. Edge cases as data (each checked against
// torch 1.13 when written), then folds of several inputs, a resumed average and slices against the
// steps applied element by element.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "fold/int_average.h"
#include "fold/native_fold.h"
#include "util/error.h"

using namespace swavg;

namespace {

// Tensor.copy_(float32 -> integer) on x86-64: truncation through int64 (out of range: INT64_MIN),
// the narrow types then wrapping.
template <typename T>
T truncate(float f) {
  if (!(f >= -9223372036854775808.0f && f < 9223372036854775808.0f)) return static_cast<T>(INT64_MIN);
  return static_cast<T>(static_cast<int64_t>(std::trunc(f)));
}

// avg + (x - avg) / (folded + 1), as torch computes it on an integer avg.
template <typename T>
T torch_swa(T avg, T x, int64_t folded) {
  using U = std::make_unsigned_t<T>;
  const T diff = static_cast<T>(static_cast<U>(static_cast<U>(x) - static_cast<U>(avg)));
  volatile float quotient = static_cast<float>(diff) / static_cast<float>(folded + 1);
  volatile float sum = static_cast<float>(avg) + quotient;
  return truncate<T>(sum);
}

// avg * decay + x * (1 - decay), each product a float32 tensor.
template <typename T>
T torch_ema(T avg, T x, double decay) {
  volatile float a = static_cast<float>(avg) * static_cast<float>(decay);
  volatile float b = static_cast<float>(x) * static_cast<float>(1.0 - decay);
  volatile float sum = a + b;
  return truncate<T>(sum);
}

template <typename T>
T swa_step(T avg, T x, int64_t folded, dtype t) {
  integer_swa_step(t, &avg, &x, 1, folded);
  return avg;
}

template <typename T>
T ema_step(T avg, T x, double decay, dtype t) {
  integer_ema_step(t, &avg, &x, 1, decay);
  return avg;
}

template <typename T>
tensor_view view_of(std::vector<T>& data, dtype t) {
  tensor_view v;
  v.type = t;
  v.shape = {static_cast<int64_t>(data.size())};
  v.strides = {1};
  v.storage = reinterpret_cast<const uint8_t*>(data.data());
  v.storage_bytes = data.size() * sizeof(T);
  return v;
}

tensor_plan integer_plan(dtype t, const std::vector<const tensor_view*>& views) {
  tensor_plan p;
  p.name = "counter";
  for (size_t i = 0; i < views.size(); ++i) p.sources.push_back(fold_source{i, views[i]});
  p.outcome.action = tensor_action::average;
  p.outcome.input_type = p.outcome.accumulate_type = p.outcome.output_type = t;
  p.outcome.count = static_cast<int64_t>(views.size());
  return p;
}

template <typename T>
std::vector<T> run(const fold_config& c, const tensor_plan& p, size_t* writes = nullptr) {
  std::vector<T> out;
  integer_average(c, p, [&](const void* data, uint64_t bytes) {
    REQUIRE(bytes % sizeof(T) == 0);
    const size_t at = out.size();
    out.resize(at + bytes / sizeof(T));
    std::memcpy(out.data() + at, data, bytes);
    if (writes) ++*writes;
  });
  return out;
}

}  // namespace

TEST_CASE("int_average: SWA steps, worked by hand at the edges", "[int_average][unit]") {
  struct edge {
    const char* what;
    int64_t avg, x, folded, want;
  };
  const std::vector<edge> int64_edges = {
      {"halves truncate toward zero", 1, 2, 1, 1},
      {"negative halves truncate toward zero, not down", -1, -2, 1, -1},
      {"equal values stay", 7, 7, 5, 7},
      {"the third of three", 3, 9, 2, 5},
      {"2^53 + 1 averaged with itself is rounded to float32 first", 9007199254740993, 9007199254740993, 1,
       9007199254740992},
      {"INT64_MAX with itself: float32 2^63 is out of range, copy_ gives INT64_MIN",
       std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max(), 1,
       std::numeric_limits<int64_t>::min()},
      {"x - avg wraps: INT64_MAX - INT64_MIN is -1", std::numeric_limits<int64_t>::min(),
       std::numeric_limits<int64_t>::max(), 1, std::numeric_limits<int64_t>::min()},
  };
  for (const auto& e : int64_edges) {
    INFO(e.what);
    CHECK(swa_step<int64_t>(e.avg, e.x, e.folded, dtype::int64) == e.want);
    CHECK(torch_swa<int64_t>(e.avg, e.x, e.folded) == e.want);
  }
  // The narrow types: x - avg wraps in the dtype before the division.
  CHECK(swa_step<int8_t>(-128, 127, 1, dtype::int8) == -128);                 // 127 - (-128) wraps to -1
  CHECK(swa_step<int8_t>(-100, 100, 1, dtype::int8) == -128);                 // 200 wraps to -56: -100 - 28
  CHECK(swa_step<uint8_t>(200, 10, 1, dtype::uint8) == 233);                  // 10 - 200 wraps to 66
  CHECK(swa_step<uint8_t>(10, 200, 1, dtype::uint8) == 105);                  // no wrap
  CHECK(swa_step<int16_t>(-3, 0, 2, dtype::int16) == -2);                     // -3 + 1 = -2 exactly
  CHECK(swa_step<int32_t>(16777217, 16777217, 3, dtype::int32) == 16777216);  // 2^24 + 1 in float32
  CHECK(swa_step<int32_t>(std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::max(), 1,
                          dtype::int32) == std::numeric_limits<int32_t>::min());  // 2^31 through int64, wrapped
}

TEST_CASE("int_average: EMA steps, worked by hand at the edges", "[int_average][unit]") {
  struct edge {
    const char* what;
    int64_t avg, x;
    double decay;
    int64_t want;
  };
  const std::vector<edge> edges = {
      {"decay 0.5 is the mean", 10, 20, 0.5, 15},
      {"decay 0 takes x", 10, 20, 0.0, 20},
      {"decay 1 keeps avg", 10, 20, 1.0, 10},
      {"truncation toward zero", 0, 3, 0.5, 1},
      {"truncation toward zero, negative", 0, -3, 0.5, -1},
      {"each product rounded to float32: 0.9 * 10 + 0.1 * 20", 10, 20, 0.9, 11},
      {"each product rounded to float32: 0.1 * 9 + 0.9 * 9 is below 9", 9, 9, 0.1, 8},
  };
  for (const auto& e : edges) {
    INFO(e.what);
    CHECK(ema_step<int64_t>(e.avg, e.x, e.decay, dtype::int64) == e.want);
    CHECK(torch_ema<int64_t>(e.avg, e.x, e.decay) == e.want);
  }
  // 9 * 0.9f + 9 * 0.1f is 8.999999 in float32: equal inputs fall by one (torch 1.13 gives 8 too).
  CHECK(ema_step<uint8_t>(9, 9, 0.1, dtype::uint8) == 8);
  CHECK(torch_ema<uint8_t>(9, 9, 0.1) == 8);
  CHECK(ema_step<uint8_t>(255, 255, 0.999, dtype::uint8) == 255);  // 255.000015 truncates to 255
}

TEST_CASE("int_average: every integer dtype against the formula, over a range of values", "[int_average][unit]") {
  const auto sweep = [](auto tag, dtype t) {
    using T = decltype(tag);
    const int64_t lo = std::numeric_limits<T>::min(), hi = std::numeric_limits<T>::max();
    std::vector<T> values;
    for (int64_t v : {lo, lo + 1, int64_t{-1000}, int64_t{-3}, int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{2},
                      int64_t{77}, int64_t{1000}, hi - 1, hi})
      if (v >= lo && v <= hi) values.push_back(static_cast<T>(v));
    for (const T avg : values)
      for (const T x : values) {
        INFO(dtype_name(t) << " avg " << int64_t{avg} << " x " << int64_t{x});
        for (const int64_t folded : {1, 2, 9})
          CHECK(int64_t{swa_step<T>(avg, x, folded, t)} == int64_t{torch_swa<T>(avg, x, folded)});
        for (const double decay : {0.0, 0.25, 0.9, 0.999})
          CHECK(int64_t{ema_step<T>(avg, x, decay, t)} == int64_t{torch_ema<T>(avg, x, decay)});
      }
  };
  sweep(int64_t{}, dtype::int64);
  sweep(int32_t{}, dtype::int32);
  sweep(int16_t{}, dtype::int16);
  sweep(int8_t{}, dtype::int8);
  sweep(uint8_t{}, dtype::uint8);
  int64_t a = 0, b = 0;
  CHECK_THROWS_WITH(integer_swa_step(dtype::bool_, &a, &b, 1, 1), Catch::Contains("no integer average for dtype bool"));
  CHECK_THROWS_AS(integer_ema_step(dtype::float32, &a, &b, 1, 0.5), std::logic_error);
}

TEST_CASE("int_average: which planned tensors it folds", "[int_average][unit]") {
  struct which {
    dtype type;
    tensor_action action;
    bool integer;
  };
  const std::vector<which> cases = {
      {dtype::int64, tensor_action::average, true},      {dtype::uint8, tensor_action::average, true},
      {dtype::int64, tensor_action::latest, false},      {dtype::int32, tensor_action::first, false},
      {dtype::float32, tensor_action::average, false},   {dtype::bfloat16, tensor_action::average, false},
      {dtype::complex64, tensor_action::average, false},
  };
  for (const auto& k : cases) {
    INFO(dtype_name(k.type) << " " << action_name(k.action));
    tensor_plan p;
    p.outcome.input_type = k.type;
    p.outcome.action = k.action;
    CHECK(is_integer_average(p) == k.integer);
  }
}

TEST_CASE("int_average: a fold of several inputs is the steps in order", "[int_average][unit]") {
  std::vector<int64_t> a = {0, 10, -7, 1000001}, b = {1, 20, -8, 3}, c = {4, -30, 5, 1000000};
  const tensor_view va = view_of(a, dtype::int64), vb = view_of(b, dtype::int64), vc = view_of(c, dtype::int64);
  const tensor_plan p = integer_plan(dtype::int64, {&va, &vb, &vc});
  fold_config swa;
  const std::vector<int64_t> got = run<int64_t>(swa, p);
  REQUIRE(got.size() == a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(i);
    CHECK(got[i] == torch_swa<int64_t>(torch_swa<int64_t>(a[i], b[i], 1), c[i], 2));
  }
  CHECK(got[1] == 0);  // 10 -> 15 -> 15 + (-45 / 3) = 0

  fold_config ema;
  ema.mode = fold_mode::ema;
  ema.decay = 0.75;
  const std::vector<int64_t> smoothed = run<int64_t>(ema, p);
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(i);
    CHECK(smoothed[i] == torch_ema<int64_t>(torch_ema<int64_t>(a[i], b[i], 0.75), c[i], 0.75));
  }

  fold_config weighted;
  weighted.mode = fold_mode::weighted;
  weighted.weights = {1, 1, 1};
  CHECK_THROWS_WITH(run<int64_t>(weighted, p),
                    Catch::Contains("tensor 'counter': integer averages are for SWA and EMA"));
}

TEST_CASE("int_average: a resumed average counts as its checkpoints", "[int_average][unit]") {
  std::vector<int32_t> earlier = {10, -10, 0}, x = {20, 20, 7};
  const tensor_view ve = view_of(earlier, dtype::int32), vx = view_of(x, dtype::int32);
  tensor_plan p = integer_plan(dtype::int32, {&vx});
  p.resumed = &ve;
  p.resumed_count = 4;  // x is the fifth: avg + (x - avg) / 5
  const std::vector<int32_t> got = run<int32_t>(fold_config{}, p);
  const std::vector<int32_t> want = {12, -4, 1};
  CHECK(got == want);

  std::vector<int64_t> wide = {10, -10, 0};
  const tensor_view vw = view_of(wide, dtype::int64);
  p.resumed = &vw;
  CHECK_THROWS_AS(run<int32_t>(fold_config{}, p), mismatch_error);
  CHECK_THROWS_WITH(run<int32_t>(fold_config{}, p),
                    Catch::Contains("tensor 'counter': the resumed average holds int64 but the inputs int32"));
}

TEST_CASE("int_average: slices change no value, at the slice edge", "[int_average][unit]") {
  for (const int64_t numel : {kFoldChunkElements, kFoldChunkElements + 1}) {
    INFO(numel);
    std::vector<int16_t> a(static_cast<size_t>(numel)), b(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<int16_t>(i * 7919);
      b[i] = static_cast<int16_t>(i * 104729 + 3);
    }
    const tensor_view va = view_of(a, dtype::int16), vb = view_of(b, dtype::int16);
    size_t writes = 0;
    const std::vector<int16_t> got = run<int16_t>(fold_config{}, integer_plan(dtype::int16, {&va, &vb}), &writes);
    CHECK(writes == (numel > kFoldChunkElements ? 2u : 1u));
    REQUIRE(got.size() == a.size());
    size_t wrong = 0;
    for (size_t i = 0; i < a.size(); ++i) wrong += got[i] != torch_swa<int16_t>(a[i], b[i], 1);
    CHECK(wrong == 0);
  }
}

TEST_CASE("int_average: uint16, uint32 and uint64 as torch 2.14 computes them", "[int_average][unit]") {
  // EMA: what torch 2.14 gives for avg.copy_(avg * d + x * (1 - d)) (get_ema_multi_avg_fn's integer
  // branch). SWA: the formula torch cannot run on these dtypes (no uint16-64 subtraction), the
  // wrapped difference and float32 sum from numpy, converted by torch's copy_. Checked with torch
  // 2.14.1 on x86-64 (AVX-512) when written, on 32-element tensors (the vector lanes); the float32
  // sum reaching 2^bits (the top value, rounded) gives 0 there, as the CLI test checks on
  // thousands of values.
  struct edge {
    dtype type;
    uint64_t avg, x;
    double decay;  // EMA, or < 0 for SWA with `folded`
    int64_t folded;
    uint64_t want;
  };
  constexpr uint64_t k16 = 65535, k32 = 4294967295u, k64 = std::numeric_limits<uint64_t>::max();
  const std::vector<edge> edges = {
      {dtype::uint16, k16, k16, 0.5, 0, 65535},
      {dtype::uint16, k16, 0, 0.999, 0, 65469},
      {dtype::uint16, 12345, 678, 0.9, 0, 11178},
      {dtype::uint16, k16 - 100, k16, 0.25, 0, 65510},
      {dtype::uint16, k16, k16 - 1, -1, 1, 32766},  // the difference wraps to 65535; 98302.5 keeps its low bits
      {dtype::uint16, 5, 3, -1, 1, 32772},
      {dtype::uint16, 100, 7, -1, 2, 21914},
      {dtype::uint32, k32, k32, 0.5, 0, 0},  // float32 2^32: out of range, 0
      {dtype::uint32, k32, 0, 0.999, 0, 4290672384u},
      {dtype::uint32, 12345, 678, 0.9, 0, 11178},
      // 1.5 * 2^32: 0 in torch's vector lanes (here), its low 32 bits (2^31) in its scalar tail
      {dtype::uint32, k32, k32 - 1, -1, 1, 0},
      {dtype::uint32, k32, 0, -1, 3, 0},
      {dtype::uint32, 0, k32, -1, 1, 2147483648u},
      {dtype::uint32, 100, 7, -1, 2, 1431655936u},
      {dtype::uint64, k64, k64, 0.5, 0, 0},
      {dtype::uint64, k64, 0, 0.999, 0, 18428297567130353664ull},
      {dtype::uint64, 12345, 678, 0.9, 0, 11178},
      {dtype::uint64, k64, k64 - 1, -1, 1, 0},
      {dtype::uint64, 5, 3, -1, 1, 9223372036854775808ull},
      {dtype::uint64, 0, k64, -1, 1, 9223372036854775808ull},
      {dtype::uint64, 100, 7, -1, 2, 6148914874488455168ull},
  };
  for (const auto& e : edges) {
    INFO(dtype_name(e.type) << " avg " << e.avg << " x " << e.x << " decay " << e.decay << " folded " << e.folded);
    uint64_t acc = e.avg, x = e.x;  // little-endian: the low bytes are the narrow value
    if (e.decay >= 0)
      integer_ema_step(e.type, &acc, &x, 1, e.decay);
    else
      integer_swa_step(e.type, &acc, &x, 1, e.folded);
    const uint64_t mask = itemsize(e.type) == 8 ? k64 : (uint64_t{1} << (8 * itemsize(e.type))) - 1;
    CHECK((acc & mask) == e.want);
  }
}
