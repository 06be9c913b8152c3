/*
 * Finding the BatchNorm modules of a TorchScript model, as update_bn does: told by class name
 * (BatchNorm1d/2d/3d, SyncBatchNorm, subclasses with BatchNorm in their name) or, for other
 * classes, by holding running_mean, running_var and num_batches_tracked buffers (but not
 * InstanceNorm or FrozenBatchNorm, which update_bn skips). For each, the momentum its forward
 * applies: TorchScript bakes it into the code, as a constant of the scripted module or of a traced
 * module's aten::batch_norm call.
 */
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace swavg {

struct bn_slot {
  std::string name;
  std::string type;
  torch::jit::Module module;
  at::Tensor mean, var, count;     // the module's own buffers (count undefined when it has none)
  std::optional<double> momentum;  // nullopt: None, a cumulative average
  size_t group = 0;                // its statistics in stat_group `group`, from `offset`: mean, then var
  int64_t offset = 0;
  int64_t counter = 0;  // its slot in the counters (its num_batches_tracked during the replay)
};

// Every BatchNorm module once (shared modules are listed under their first name). Throws
// input_error for one whose statistics replaying cannot update (traced in eval mode, momentum 0,
// momentum None without num_batches_tracked, a momentum that cannot be told).
std::vector<bn_slot> find_batchnorms(const torch::jit::Module& root, const std::string& model_path);

// The names of the BatchNorm modules ("layer1.0.bn1").
std::set<std::string> batchnorm_names(const torch::jit::Module& root);

// running_mean, running_var, num_batches_tracked: the buffers update_bn recomputes.
bool is_stat_buffer(const std::string& leaf);

}  // namespace swavg
