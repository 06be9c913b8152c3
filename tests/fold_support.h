// Helpers shared by the fold engine's unit tests (test_plan, test_resume, test_execute, ...): state
// dicts of zero-filled tensors held in memory, a small model, a plan's outcome by name, a scratch
// folder under the fixtures.
#pragma once

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fold/plan.h"
#include "tensor/state_dict.h"

namespace swavg::test {

struct spec {
  std::string name;
  dtype type = dtype::float32;
  std::vector<int64_t> shape = {2};
  tensor_kind kind = tensor_kind::unknown;
};

// A state dict of zero-filled tensors held in memory (planning reads no bytes).
inline state_dict make_sd(const std::string& path, const std::vector<spec>& specs) {
  state_dict sd;
  sd.path = path;
  for (const auto& s : specs) {
    tensor_view v;
    v.type = s.type;
    v.shape = s.shape;
    v.strides = contiguous_strides(s.shape);
    auto bytes = std::make_shared<std::vector<uint8_t>>(v.nbytes() + 8, 0);
    v.storage = bytes->data();
    v.storage_bytes = v.nbytes();
    v.storage_key = s.name;
    v.owner = bytes;
    sd.tensors.push_back(named_tensor{s.name, v, s.kind});
  }
  return sd;
}

inline const tensor_outcome& outcome(const fold_plan& plan, const std::string& name) {
  for (const auto& p : plan.tensors)
    if (p.name == name) return p.outcome;
  FAIL("no plan for " << name);
  throw std::logic_error("unreachable");
}

inline const std::vector<spec> kModel = {
    {"conv.weight", dtype::float32, {4, 2}},
    {"bn.weight"},
    {"bn.running_mean"},
    {"bn.num_batches_tracked", dtype::int64, {}},
    {"step", dtype::int32, {}},
    {"emb.weight", dtype::bfloat16, {3, 2}},
};

inline std::vector<state_dict> three_inputs(const std::vector<spec>& specs = kModel) {
  return {make_sd("a.pt", specs), make_sd("b.pt", specs), make_sd("c.pt", specs)};
}

inline std::string scratch(const std::string& name) {
  const std::string dir = std::string(SWAVG_FIXTURES_DIR) + "/scratch";
  ::mkdir(SWAVG_FIXTURES_DIR, 0755);  // a unit test may run before the fixtures are made
  ::mkdir(dir.c_str(), 0755);
  return dir + "/" + name;
}

}  // namespace swavg::test
