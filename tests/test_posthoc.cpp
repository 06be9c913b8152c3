// Post-hoc EMA outputs (fold/posthoc.h) from snapshots built in memory, written to a temporary
// folder and read back: each floating tensor is sum_i x_si theta_i accumulated in float64 in the
// snapshots' order (written out here) and rounded once, buffers and integers are the last
// snapshot's, several outputs come from one pass, and a failure leaves no output behind.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "fold/posthoc.h"
#include "formats/io/load.h"
#include "support.h"
#include "util/error.h"

using namespace swavg;
using swavg::test::temp_dir;

namespace {

template <typename T>
void add(state_dict& sd, const std::string& name, dtype t, const std::vector<T>& values) {
  auto bytes = std::make_shared<std::vector<T>>(values);
  tensor_view v;
  v.type = t;
  v.shape = {static_cast<int64_t>(values.size())};
  v.strides = {1};
  v.storage = reinterpret_cast<const uint8_t*>(bytes->data());
  v.storage_bytes = values.size() * sizeof(T);
  v.storage_key = name;
  v.owner = bytes;
  sd.tensors.push_back(named_tensor{name, v, tensor_kind::unknown});
}

// Snapshot i: w = {i + 0.1, -2i, 1e-3 (i + 1)}, d (float64), a BatchNorm buffer and a step counter.
state_dict snapshot(int i) {
  state_dict sd;
  sd.path = "snapshot_" + std::to_string(i) + ".pt";
  add<float>(sd, "w", dtype::float32, {i + 0.1f, -2.0f * i, 1e-3f * (i + 1)});
  add<double>(sd, "d", dtype::float64, {1.0 / (i + 3), i * 1e10});
  add<float>(sd, "bn.running_mean", dtype::float32, {static_cast<float>(i), 0.5f});
  add<int64_t>(sd, "step", dtype::int64, {1000 * (i + 1)});
  return sd;
}

const tensor_view& tensor(const state_dict& sd, const std::string& name) {
  for (const auto& t : sd.tensors)
    if (t.name == name) return t.view;
  FAIL("no tensor " << name << " in " << sd.path);
  throw std::logic_error("unreachable");
}

template <typename T>
std::vector<T> values(const state_dict& sd, const std::string& name) {
  const std::string bytes = test::row_major_bytes(tensor(sd, name));
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// sum_i x_i theta_i in float64, in the snapshots' order, from 0.
double combine(const std::vector<double>& x, const std::vector<double>& theta) {
  volatile double sum = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    volatile double product = x[i] * theta[i];  // rounded apart from the sum, as posthoc.cpp does
    sum = sum + product;
  }
  return sum;
}

}  // namespace

TEST_CASE("posthoc: each output is its combination of the snapshots, rounded once", "[posthoc][unit]") {
  temp_dir dir;
  const std::vector<state_dict> snapshots = {snapshot(0), snapshot(1), snapshot(2)};
  const std::vector<posthoc_output> outputs = {
      {dir.path() + "/mixed.pt", {0.5, -0.25, 0.75}, {{"sigma_rel", "0.05"}}},
      {dir.path() + "/first.pt", {1.0, 0.0, 0.0}, {}},
  };
  const posthoc_result result = run_posthoc(snapshots, outputs, output_format::torch, std::nullopt, false);
  REQUIRE(result.tensors.size() == 4);
  CHECK(result.tensors[0].action == tensor_action::average);
  CHECK(result.tensors[2].action == tensor_action::latest);  // bn.running_mean: a buffer
  CHECK(result.tensors[3].action == tensor_action::latest);  // step: an integer
  CHECK(result.bytes_read == 3 * (3 * 4 + 2 * 8 + 2 * 4 + 8));
  CHECK(result.bytes_written > 0);
  CHECK_FALSE(result.objects_dropped);

  for (const auto& o : outputs) {
    INFO(o.path);
    const state_dict got = load_state_dict(o.path);
    REQUIRE(got.tensors.size() == 4);
    CHECK(tensor(got, "w").type == dtype::float32);
    const std::vector<float> w = values<float>(got, "w");
    const std::vector<double> d = values<double>(got, "d");
    for (size_t e = 0; e < 3; ++e) {
      std::vector<double> x;
      for (const auto& s : snapshots) x.push_back(values<float>(s, "w")[e]);
      CHECK(w[e] == static_cast<float>(combine(x, o.coefficients)));
    }
    for (size_t e = 0; e < 2; ++e) {
      std::vector<double> x;
      for (const auto& s : snapshots) x.push_back(values<double>(s, "d")[e]);
      CHECK(d[e] == combine(x, o.coefficients));
    }
    CHECK(values<float>(got, "bn.running_mean") == std::vector<float>{2, 0.5f});  // the last snapshot's
    CHECK(values<int64_t>(got, "step") == std::vector<int64_t>{3000});
  }
  // Coefficients (1, 0, 0) give the first snapshot back exactly.
  CHECK(values<float>(load_state_dict(outputs[1].path), "w") == values<float>(snapshots[0], "w"));
}

TEST_CASE("posthoc: --output-dtype rounds the float64 sum to it, floating buffers too", "[posthoc][unit]") {
  temp_dir dir;
  const std::vector<state_dict> snapshots = {snapshot(1), snapshot(2)};
  const std::vector<posthoc_output> outputs = {{dir.path() + "/wide.safetensors", {-1.0, 2.0}, {}}};
  const posthoc_result result = run_posthoc(snapshots, outputs, output_format::safetensors, dtype::float64, false);
  CHECK(result.tensors[0].output_type == dtype::float64);
  const state_dict got = load_state_dict(outputs[0].path);
  CHECK(got.format == file_format::safetensors);
  CHECK(tensor(got, "w").type == dtype::float64);
  CHECK(tensor(got, "bn.running_mean").type == dtype::float64);
  CHECK(tensor(got, "step").type == dtype::int64);
  const std::vector<double> w = values<double>(got, "w");
  for (size_t e = 0; e < 3; ++e)
    CHECK(w[e] == combine({values<float>(snapshots[0], "w")[e], values<float>(snapshots[1], "w")[e]}, {-1.0, 2.0}));
  CHECK(values<double>(got, "bn.running_mean") == std::vector<double>{2, 0.5});
}

TEST_CASE("posthoc: snapshots that disagree leave no output", "[posthoc][unit]") {
  temp_dir dir;
  state_dict odd = snapshot(1);
  odd.tensors[0].view.shape = {1};
  const std::vector<posthoc_output> outputs = {{dir.path() + "/a.pt", {0.5, 0.5}, {}},
                                               {dir.path() + "/b.pt", {0.0, 1.0}, {}}};
  CHECK_THROWS_AS(run_posthoc({snapshot(0), odd}, outputs, output_format::torch, std::nullopt, false), mismatch_error);
  CHECK_THROWS_WITH(
      run_posthoc({snapshot(0), odd}, outputs, output_format::torch, std::nullopt, false),
      Catch::Contains("snapshot_1.pt: tensor 'w': expected shape [3] (as in snapshot_0.pt) but found [1]"));
  CHECK(dir.files().empty());

  // One coefficient per snapshot, or the caller is wrong.
  const std::vector<posthoc_output> short_list = {{dir.path() + "/c.pt", {1.0}, {}}};
  CHECK_THROWS_AS(run_posthoc({snapshot(0), snapshot(1)}, short_list, output_format::torch, std::nullopt, false),
                  std::logic_error);
  CHECK(dir.files().empty());

  // Snapshots without tensors: nothing to write.
  state_dict empty;
  empty.path = "empty.pt";
  CHECK_THROWS_WITH(
      run_posthoc({empty, empty}, {{dir.path() + "/e.pt", {0.5, 0.5}, {}}}, output_format::torch, std::nullopt, false),
      Catch::Contains("the snapshots hold no tensors"));
  CHECK(dir.files().empty());
}

TEST_CASE("posthoc: NaN or Inf in a snapshot that counts is refused, as average refuses it", "[posthoc][unit]") {
  temp_dir dir;
  auto with_nan = [](int i, const std::string& name) {
    state_dict sd = snapshot(i);
    for (auto& t : sd.tensors)
      if (t.name == name) {
        auto bytes = std::make_shared<std::vector<float>>(std::vector<float>{NAN, INFINITY});
        t.view.storage = reinterpret_cast<const uint8_t*>(bytes->data());
        t.view.owner = bytes;
        t.view.shape = {2};
        t.view.storage_bytes = 8;
      }
    return sd;
  };
  state_dict bad = snapshot(0);
  {
    auto bytes = std::make_shared<std::vector<float>>(std::vector<float>{1.0f, NAN, -INFINITY});
    bad.tensors[0].view.storage = reinterpret_cast<const uint8_t*>(bytes->data());
    bad.tensors[0].view.owner = bytes;
  }
  const std::string out = dir.path() + "/out.pt";
  CHECK_THROWS_WITH(run_posthoc({bad, snapshot(1)}, {{out, {0.5, 0.5}, {}}}, output_format::torch, std::nullopt, false),
                    Catch::Equals("tensor 'w' has NaN or Inf values in snapshot_0.pt (2 values); pass "
                                  "--allow-nonfinite to combine them anyway"));
  CHECK(dir.files().empty());
  try {
    run_posthoc({bad, snapshot(1)}, {{out, {0.5, 0.5}, {}}}, output_format::torch, std::nullopt, false);
  } catch (const error& e) {
    CHECK(e.code() == exit_code::bad_input);
  }
  // A coefficient of 0 in every output: the snapshot is not used, and 0 x NaN does not leak in.
  run_posthoc({bad, snapshot(1)}, {{out, {0.0, 1.0}, {}}}, output_format::torch, std::nullopt, false);
  CHECK(values<float>(load_state_dict(out), "w") == values<float>(snapshot(1), "w"));
  // --allow-nonfinite: combined anyway.
  run_posthoc({bad, snapshot(1)}, {{out, {0.5, 0.5}, {}}}, output_format::torch, std::nullopt, false, true);
  const std::vector<float> w = values<float>(load_state_dict(out), "w");
  CHECK(std::isnan(w[1]));
  CHECK(std::isinf(w[2]));
  // The last snapshot's buffers are copied: NaN there is refused too; an earlier one's is never read.
  const std::string copied = dir.path() + "/copied.pt";
  CHECK_THROWS_WITH(run_posthoc({snapshot(0), with_nan(1, "bn.running_mean")}, {{copied, {0.5, 0.5}, {}}},
                                output_format::torch, std::nullopt, false),
                    Catch::Equals("tensor 'bn.running_mean' has NaN or Inf values in snapshot_1.pt (2 values); pass "
                                  "--allow-nonfinite to combine them anyway"));
  CHECK_NOTHROW(run_posthoc({with_nan(0, "bn.running_mean"), snapshot(1)}, {{copied, {0.5, 0.5}, {}}},
                            output_format::torch, std::nullopt, false));
}

TEST_CASE("posthoc: an output that overflows its dtype is refused", "[posthoc][unit]") {
  temp_dir dir;
  const std::string out = dir.path() + "/big.pt";
  // w[1] = -2i: with coefficients +-1e39 the float32 result is -2e39, past FLT_MAX.
  CHECK_THROWS_WITH(
      run_posthoc({snapshot(1), snapshot(2)}, {{out, {-1e39, 1e39}, {}}}, output_format::torch, std::nullopt, false),
      Catch::Contains("tensor 'w': its combination for " + out +
                      " has NaN or Inf values though no snapshot has: it overflowed float32"));
  CHECK(dir.files().empty());
  CHECK_NOTHROW(run_posthoc({snapshot(1), snapshot(2)}, {{out, {-1e39, 1e39}, {}}}, output_format::torch, std::nullopt,
                            false, true));
}
