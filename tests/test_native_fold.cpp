// One planned tensor averaged by swavg's own kernels (fold/native_fold.h), on tensors built in
// memory: which plans the kernels cover (as data), SWA against AveragedModel's expression written out
// here in the accumulator's dtype, lerp folds on values whose results are exact in either lerp form,
// a resumed average, strided inputs, and the slices at kFoldChunkElements.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fold/native_fold.h"
#include "fold/native_kernels.h"

using namespace swavg;

namespace {

template <typename T>
tensor_view view_of(const std::vector<T>& data, dtype t, std::vector<int64_t> shape = {},
                    std::vector<int64_t> strides = {}) {
  tensor_view v;
  v.type = t;
  v.shape = shape.empty() ? std::vector<int64_t>{static_cast<int64_t>(data.size())} : shape;
  v.strides = strides.empty() ? contiguous_strides(v.shape) : strides;
  v.storage = reinterpret_cast<const uint8_t*>(data.data());
  v.storage_bytes = data.size() * sizeof(T);
  return v;
}

tensor_plan plan_of(const std::vector<const tensor_view*>& views, dtype acc, dtype out) {
  tensor_plan p;
  p.name = "w";
  for (size_t i = 0; i < views.size(); ++i) p.sources.push_back(fold_source{i, views[i]});
  p.outcome.action = tensor_action::average;
  p.outcome.input_type = views.empty() ? out : views.front()->type;
  p.outcome.accumulate_type = acc;
  p.outcome.output_type = out;
  p.outcome.count = static_cast<int64_t>(views.size());
  return p;
}

// The finished slices, concatenated, and how many there were.
template <typename T>
std::vector<T> fold(const fold_config& c, const tensor_plan& p, std::vector<uint64_t>* slices = nullptr) {
  std::vector<T> out;
  native_average(c, p, [&](const void* data, uint64_t bytes) {
    REQUIRE(bytes % sizeof(T) == 0);
    const size_t at = out.size();
    out.resize(at + bytes / sizeof(T));
    std::memcpy(out.data() + at, data, bytes);
    if (slices) slices->push_back(bytes);
  });
  return out;
}

// AveragedModel's SWA step, avg + (x - avg) / (n + 1), each operation rounded in T.
template <typename T>
T swa(T avg, T x, int64_t n) {
  volatile T diff = x - avg;
  volatile T quotient = diff / static_cast<T>(n + 1);
  return avg + quotient;
}

}  // namespace

TEST_CASE("native_fold: which plans the kernels cover", "[native_fold][unit]") {
  const std::vector<float> f32(2);
  const std::vector<double> f64(2);
  const std::vector<uint16_t> half(2);
  const std::vector<int64_t> i64(2);
  const tensor_view v32 = view_of(f32, dtype::float32), v64 = view_of(f64, dtype::float64),
                    v16 = view_of(half, dtype::float16), vbf = view_of(half, dtype::bfloat16),
                    vint = view_of(i64, dtype::int64);
  const bool lerp_32_32 = lerp_form_for(dtype::float32, dtype::float32).has_value();
  const bool lerp_32_64 = lerp_form_for(dtype::float32, dtype::float64).has_value();
  struct cover {
    const char* what;
    fold_mode mode;
    std::vector<const tensor_view*> inputs;
    dtype acc, out;
    const tensor_view* resumed;
    bool cuda;
    bool covered;
  };
  const std::vector<cover> cases = {
      {"swa float32", fold_mode::swa, {&v32, &v32}, dtype::float32, dtype::float32, nullptr, false, true},
      {"swa float16 into float32", fold_mode::swa, {&v16, &v16}, dtype::float32, dtype::float16, nullptr, false, true},
      {"swa bfloat16 into float32", fold_mode::swa, {&vbf}, dtype::float32, dtype::bfloat16, nullptr, false, true},
      {"swa float32 into float64", fold_mode::swa, {&v32}, dtype::float64, dtype::float32, nullptr, false, true},
      {"swa float64 into float64", fold_mode::swa, {&v64}, dtype::float64, dtype::float64, nullptr, false, true},
      {"swa float64 into float32: ATen rounds once, the kernel would twice",
       fold_mode::swa,
       {&v32, &v64},
       dtype::float32,
       dtype::float32,
       nullptr,
       false,
       false},
      {"a 16-bit accumulator (--accumulate native)",
       fold_mode::swa,
       {&v16},
       dtype::float16,
       dtype::float16,
       nullptr,
       false,
       false},
      {"an integer input", fold_mode::swa, {&vint}, dtype::float32, dtype::float32, nullptr, false, false},
      {"an integer output", fold_mode::swa, {&v32}, dtype::float32, dtype::int64, nullptr, false, false},
      {"a floating resumed average", fold_mode::swa, {&v32}, dtype::float32, dtype::float32, &v64, false, true},
      {"an integer resumed average", fold_mode::swa, {&v32}, dtype::float32, dtype::float32, &vint, false, false},
      {"on a GPU", fold_mode::swa, {&v32}, dtype::float32, dtype::float32, nullptr, true, false},
      {"ema float32: where the lerp form is known",
       fold_mode::ema,
       {&v32, &v32},
       dtype::float32,
       dtype::float32,
       nullptr,
       false,
       lerp_32_32},
      {"ema float64 into float32: where the lerp form is known",
       fold_mode::ema,
       {&v64},
       dtype::float32,
       dtype::float32,
       nullptr,
       false,
       lerp_32_64},
      {"weighted float32: where the lerp form is known",
       fold_mode::weighted,
       {&v32},
       dtype::float32,
       dtype::float32,
       nullptr,
       false,
       lerp_32_32},
      {"ema with an integer input", fold_mode::ema, {&vint}, dtype::float32, dtype::float32, nullptr, false, false},
  };
  for (const auto& k : cases) {
    INFO(k.what);
    fold_config c;
    c.mode = k.mode;
    if (k.cuda) c.device.kind = device_kind::cuda;
    if (k.mode == fold_mode::weighted) c.weights.assign(k.inputs.size(), 1.0);
    tensor_plan p = plan_of(k.inputs, k.acc, k.out);
    p.resumed = k.resumed;
    CHECK(native_average_covers(c, p) == k.covered);
    CHECK(native_average_gap(c, p).has_value() == !k.covered);
  }
}

TEST_CASE("native_fold: a lerp weight of exactly 1 is ATen's where its lanes and tails differ (2.x)",
          "[native_fold][unit]") {
  const std::vector<float> f32(2);
  const tensor_view v32 = view_of(f32, dtype::float32);
  const auto form = lerp_form_for(dtype::float32, dtype::float32);
  if (!form) return;  // the whole lerp is ATen's here
  const bool two = *form == lerp_form::w_minus_one;
  fold_config c;
  c.mode = fold_mode::ema;
  const tensor_plan p = plan_of({&v32, &v32}, dtype::float32, dtype::float32);
  // Weight 1 - decay as the float32 accumulator holds it: 1 - 2^-24 is the last float below 1.
  c.decay = 0x1p-24;
  CHECK(native_average_covers(c, p));
  c.decay = 0x1p-26;  // 1 - 2^-26 rounds to 1 as a float
  CHECK(native_average_covers(c, p) == !two);
  c.decay = 0.0;
  CHECK(native_average_covers(c, p) == !two);
  if (two) CHECK(native_average_gap(c, p)->find("a lerp weight of exactly 1") != std::string::npos);
  // The weight that starts the average is a copy, not a lerp: one input never needs ATen.
  CHECK(native_average_covers(c, plan_of({&v32}, dtype::float32, dtype::float32)));
  // Weighted: a zero weight before the first non-zero one makes that one's weight exactly 1.
  c.mode = fold_mode::weighted;
  c.weights = {0.0, 2.0};
  CHECK(native_average_covers(c, p) == !two);
  c.weights = {1.0, 2.0};
  CHECK(native_average_covers(c, p));
}

TEST_CASE("native_fold: SWA is AveragedModel's expression, input after input", "[native_fold][unit]") {
  const std::vector<float> a = {0.1f, -3.25f, 1e-7f, 7.0f, 123456.7f}, b = {0.7f, 2.5f, 3e-7f, -7.0f, 0.3f},
                           c = {1.3f, 1.0f / 3, -2e-7f, 7.0f, 99.9f};
  const tensor_view va = view_of(a, dtype::float32), vb = view_of(b, dtype::float32), vc = view_of(c, dtype::float32);

  const std::vector<float> got = fold<float>(fold_config{}, plan_of({&va, &vb, &vc}, dtype::float32, dtype::float32));
  REQUIRE(got.size() == a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(i);
    const float want = swa<float>(swa<float>(a[i], b[i], 1), c[i], 2);
    CHECK(std::memcmp(&got[i], &want, sizeof(float)) == 0);
  }

  // --accumulate float64: widened exactly, averaged in float64, rounded once to float32.
  const std::vector<float> wide = fold<float>(fold_config{}, plan_of({&va, &vb, &vc}, dtype::float64, dtype::float32));
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(i);
    const float want = static_cast<float>(swa<double>(swa<double>(a[i], b[i], 1), c[i], 2));
    CHECK(std::memcmp(&wide[i], &want, sizeof(float)) == 0);
  }

  // One input is a copy of it.
  CHECK(fold<float>(fold_config{}, plan_of({&vb}, dtype::float32, dtype::float32)) == b);
}

TEST_CASE("native_fold: a resumed average holds resumed_count checkpoints", "[native_fold][unit]") {
  const std::vector<double> earlier = {1.0, -2.0, 0.5};
  const std::vector<float> x = {6.0f, 3.0f, 0.25f};
  const tensor_view ve = view_of(earlier, dtype::float64), vx = view_of(x, dtype::float32);
  tensor_plan p = plan_of({&vx}, dtype::float32, dtype::float32);
  p.resumed = &ve;
  p.resumed_count = 4;  // x is the fifth: r + (x - r) / 5
  const std::vector<float> got = fold<float>(fold_config{}, p);
  REQUIRE(got.size() == 3);
  CHECK(got[0] == 2.0f);   // 1 + 5 / 5
  CHECK(got[1] == -1.0f);  // -2 + 5 / 5
  CHECK(got[2] == swa<float>(0.5f, 0.25f, 4));
}

TEST_CASE("native_fold: EMA and weighted folds lerp with the schedule's weight", "[native_fold][unit]") {
  if (!lerp_form_for(dtype::float32, dtype::float32)) {
    WARN("no lerp form known on this CPU (no AVX2 with FMA): the lerp folds need LibTorch here");
    return;
  }
  // Exact in either lerp form: the weights are powers of two and the values small integers.
  const std::vector<float> a = {0, 4, -8, 1}, b = {4, 0, 8, 1}, c = {8, 8, 0, 1};
  const tensor_view va = view_of(a, dtype::float32), vb = view_of(b, dtype::float32), vc = view_of(c, dtype::float32);
  fold_config ema;
  ema.mode = fold_mode::ema;
  ema.decay = 0.75;  // w = 0.25: avg + 0.25 (x - avg)
  CHECK(fold<float>(ema, plan_of({&va, &vb}, dtype::float32, dtype::float32)) == std::vector<float>{1, 3, -4, 1});
  CHECK(fold<float>(ema, plan_of({&va, &vb, &vc}, dtype::float32, dtype::float32)) ==
        std::vector<float>{2.75f, 4.25f, -3, 1});

  fold_config weighted;
  weighted.mode = fold_mode::weighted;
  weighted.weights = {1, 3};  // w = 3 / 4
  CHECK(fold<float>(weighted, plan_of({&va, &vb}, dtype::float32, dtype::float32)) == std::vector<float>{3, 1, 4, 1});
  weighted.weights = {1, 1, 2};  // w = 1/2, then 2/4: (a + b) / 4 + c / 2
  CHECK(fold<float>(weighted, plan_of({&va, &vb, &vc}, dtype::float32, dtype::float32)) ==
        std::vector<float>{5, 5, 0, 1});
}

TEST_CASE("native_fold: strided inputs are read in row-major order", "[native_fold][unit]") {
  // A 2x3 tensor stored transposed: element (i, j) at j * 2 + i.
  const std::vector<float> storage = {1, 4, 2, 5, 3, 6};
  const tensor_view t = view_of(storage, dtype::float32, {2, 3}, {1, 2});
  const std::vector<float> ones(6, 1.0f);
  const tensor_view u = view_of(ones, dtype::float32, {2, 3});
  const flat_input flat(t);
  std::vector<float> row_major(6);
  std::memcpy(row_major.data(), flat.at(0), sizeof(float) * 6);
  CHECK(row_major == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(flat_input(u).at(2) == u.data() + 2 * sizeof(float));  // contiguous: the bytes themselves, no copy
  CHECK(fold<float>(fold_config{}, plan_of({&t, &u}, dtype::float32, dtype::float32)) ==
        std::vector<float>{1, 1.5f, 2, 2.5f, 3, 3.5f});
}

TEST_CASE("native_fold: slices of kFoldChunkElements change no bit, at the edge", "[native_fold][unit]") {
  for (const int64_t numel : {kFoldChunkElements, kFoldChunkElements + 1}) {
    INFO(numel);
    std::vector<float> a(static_cast<size_t>(numel)), b(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      a[i] = static_cast<float>(i) * 0.001f;
      b[i] = 1.0f / static_cast<float>(i + 1);
    }
    const tensor_view va = view_of(a, dtype::float32), vb = view_of(b, dtype::float32);
    std::vector<uint64_t> slices;
    const std::vector<double> got =
        fold<double>(fold_config{}, plan_of({&va, &vb}, dtype::float32, dtype::float64), &slices);
    const std::vector<uint64_t> want_slices = numel > kFoldChunkElements
                                                  ? std::vector<uint64_t>{uint64_t(kFoldChunkElements) * 8, 8}
                                                  : std::vector<uint64_t>{uint64_t(kFoldChunkElements) * 8};
    CHECK(slices == want_slices);
    REQUIRE(got.size() == a.size());
    size_t wrong = 0;
    for (size_t i = 0; i < a.size(); ++i) wrong += got[i] != static_cast<double>(swa<float>(a[i], b[i], 1));
    CHECK(wrong == 0);
  }
}

TEST_CASE("native_fold: a plan the kernels do not cover is a logic error, naming the tensor", "[native_fold][unit]") {
  const std::vector<int64_t> i64 = {1, 2};
  const tensor_view v = view_of(i64, dtype::int64);
  CHECK_THROWS_AS(fold<float>(fold_config{}, plan_of({&v, &v}, dtype::float32, dtype::float32)), std::logic_error);
  CHECK_THROWS_WITH(fold<float>(fold_config{}, plan_of({&v, &v}, dtype::float32, dtype::float32)),
                    "copying of tensor 'w' is not covered by the native kernels");
}
