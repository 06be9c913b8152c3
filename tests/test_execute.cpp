// run_fold (fold/execute.h) end to end: on state dicts built in memory (what is written where, read
// back), and over a real training run's checkpoints (fixtures), where the native kernels give
// PyTorch's own SWA and EMA averages bit for bit and buffers are the last checkpoint's.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fold/execute.h"
#include "fold/native_kernels.h"
#include "fold/resume.h"
#include "fold_support.h"
#include "formats/io/load.h"
#include "support.h"
#include "util/error.h"

using namespace swavg;
using namespace swavg::test;

namespace {

// Checkpoint i of a small model held in memory: w = {i, 2i, -i / 4}, a BatchNorm buffer, a step
// counter, and a head tied to the embedding (one storage, one view).
state_dict checkpoint(int i) {
  auto w = std::make_shared<std::vector<float>>(std::vector<float>{float(i), 2.0f * i, -i / 4.0f});
  auto mean = std::make_shared<std::vector<float>>(std::vector<float>{0.5f * i, 1.0f});
  auto step = std::make_shared<std::vector<int64_t>>(std::vector<int64_t>{100 * (i + 1)});
  auto emb = std::make_shared<std::vector<float>>(std::vector<float>{1.0f + i, 3.0f * i});
  state_dict sd;
  sd.path = "ckpt_" + std::to_string(i) + ".pt";
  const auto add = [&sd](const std::string& name, dtype t, std::vector<int64_t> shape, const void* data, uint64_t bytes,
                         std::shared_ptr<const void> owner, const std::string& key) {
    tensor_view v;
    v.type = t;
    v.shape = shape;
    v.strides = contiguous_strides(shape);
    v.storage = static_cast<const uint8_t*>(data);
    v.storage_bytes = bytes;
    v.storage_key = key;
    v.owner = std::move(owner);
    sd.tensors.push_back(named_tensor{name, v, tensor_kind::unknown});
  };
  add("w", dtype::float32, {3}, w->data(), 12, w, "0");
  add("bn.running_mean", dtype::float32, {2}, mean->data(), 8, mean, "1");
  add("step", dtype::int64, {}, step->data(), 8, step, "2");
  add("emb.weight", dtype::float32, {2}, emb->data(), 8, emb, "3");
  add("head.weight", dtype::float32, {2}, emb->data(), 8, emb, "3");
  return sd;
}

template <typename T>
std::vector<T> values_of(const state_dict& sd, const std::string& name) {
  for (const auto& t : sd.tensors)
    if (t.name == name) {
      const std::string bytes = test::row_major_bytes(t.view);
      std::vector<T> out(bytes.size() / sizeof(T));
      std::memcpy(out.data(), bytes.data(), bytes.size());
      return out;
    }
  FAIL("no tensor " << name << " in " << sd.path);
  return {};
}

}  // namespace

TEST_CASE("run_fold: an SWA of state dicts in memory, written and read back", "[execute][unit]") {
  temp_dir dir;
  fold_inputs in;
  for (int i = 0; i < 3; ++i) in.checkpoints.push_back(checkpoint(i));
  const std::string out = dir.path() + "/avg.pt";
  const fold_result result = run_fold(fold_config{}, in, fold_target{out, output_format::torch});
  CHECK(result.n == 3);
  REQUIRE(result.tensors.size() == 5);
  CHECK(result.tensors[0].action == tensor_action::average);
  CHECK(result.tensors[1].action == tensor_action::latest);  // a buffer
  CHECK(result.tensors[2].action == tensor_action::latest);  // an integer
  REQUIRE(result.tied.size() == 1);
  CHECK(result.tied[0].name == "head.weight");
  CHECK(result.tied[0].to == "emb.weight");
  CHECK(result.bytes_written > 0);

  const state_dict got = load_state_dict(out);
  CHECK(values_of<float>(got, "w") == std::vector<float>{1, 2, -0.25f});        // the mean of 0, 1, 2
  CHECK(values_of<float>(got, "bn.running_mean") == std::vector<float>{1, 1});  // the last checkpoint's
  CHECK(values_of<int64_t>(got, "step") == std::vector<int64_t>{300});
  CHECK(values_of<float>(got, "emb.weight") == std::vector<float>{2, 3});
  CHECK(values_of<float>(got, "head.weight") == std::vector<float>{2, 3});
  std::map<std::string, std::string> keys;
  for (const auto& t : got.tensors) keys[t.name] = t.view.storage_key;
  CHECK(keys.at("head.weight") == keys.at("emb.weight"));  // written once, a second view of it
  CHECK(keys.at("w") != keys.at("emb.weight"));
  REQUIRE(got.metadata.count(kResumeKey) == 1);
  const resume_record record = resume_record_from_json(got.metadata.at(kResumeKey), out);
  CHECK(record.mode == fold_mode::swa);
  CHECK(record.n == 3);
}

TEST_CASE("run_fold: what the kernels cannot fold, or inputs that disagree, leave no output", "[execute][unit]") {
  temp_dir dir;
  fold_inputs in;
  for (int i = 0; i < 2; ++i) in.checkpoints.push_back(checkpoint(i));
  const std::string out = dir.path() + "/avg.pt";
  fold_config gpu;
  gpu.device.kind = device_kind::cuda;
  CHECK_THROWS_AS(run_fold(gpu, in, fold_target{out, output_format::torch}), needs_libtorch);
  CHECK(dir.files().empty());

  in.checkpoints[1].tensors[0].view.shape = {2};
  CHECK_THROWS_AS(run_fold(fold_config{}, in, fold_target{out, output_format::torch}), mismatch_error);
  CHECK_THROWS_WITH(run_fold(fold_config{}, in, fold_target{out, output_format::torch}),
                    Catch::Contains("ckpt_1.pt: tensor 'w': expected shape [3] (as in ckpt_0.pt) but found [2]"));
  CHECK(dir.files().empty());
}

TEST_CASE("run_fold: the native kernels give PyTorch's averages bit for bit", "[plan][fold][fixtures]") {
  const state_dict reference = load_state_dict(fixture("runs/cnn/reference.pt"));
  std::map<std::string, const tensor_view*> want;
  for (const auto& t : reference.tensors) want[t.name] = &t.view;
  load_options load;
  load.key = "model";
  for (const fold_mode mode : {fold_mode::swa, fold_mode::ema}) {
    INFO(mode_name(mode));
    // Without LibTorch the lerp kernel is trusted only on CPUs where ATen takes the FMA path.
    if (mode == fold_mode::ema && !lerp_form_for(dtype::float32, dtype::float32)) continue;
    fold_inputs in;
    for (int i = 0; i < 6; ++i)
      in.checkpoints.push_back(load_state_dict(fixture("runs/cnn/ckpt_" + std::to_string(i) + ".pt"), load));
    fold_config c;
    c.mode = mode;
    c.decay = 0.9;
    const std::string out = scratch(std::string("plan_") + mode_name(mode) + ".pt");
    ::unlink(out.c_str());
    const fold_result result = run_fold(c, in, fold_target{out, output_format::torch});
    CHECK(result.n == 6);
    const state_dict got = load_state_dict(out);
    size_t compared = 0;
    for (const auto& t : got.tensors) {
      INFO(t.name);
      auto it = want.find(std::string(mode == fold_mode::swa ? "swa." : "ema.") + t.name);
      if (it == want.end()) {  // a buffer: the last checkpoint's (--buffers latest)
        const auto& last = in.checkpoints.back().tensors;
        const auto same =
            std::find_if(last.begin(), last.end(), [&](const named_tensor& x) { return x.name == t.name; });
        REQUIRE(same != last.end());
        CHECK(test::row_major_bytes(t.view) == test::row_major_bytes(same->view));
        continue;
      }
      CHECK(test::row_major_bytes(t.view) == test::row_major_bytes(*it->second));
      ++compared;
    }
    CHECK(compared == want.size() / 2);
    CHECK(got.metadata.count(kResumeKey) == 1);
  }
}
