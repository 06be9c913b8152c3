// run_fold (fold/execute.h) end to end: the native kernels over a real training run's checkpoints
// (fixtures) give PyTorch's own SWA and EMA averages bit for bit, buffers the last checkpoint's.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>
#include <string>

#include "fold/execute.h"
#include "fold/native_kernels.h"
#include "fold/resume.h"
#include "formats/load.h"
#include "fold_support.h"
#include "support.h"

using namespace swavg;
using namespace swavg::test;

TEST_CASE("run_fold: the native kernels give PyTorch's averages bit for bit", "[plan][fold]") {
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
