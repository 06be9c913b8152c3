/*
 * Recomputes BatchNorm running statistics by replaying data through a TorchScript model, with the
 * result of torch.optim.swa_utils.update_bn(loader, model): for every BatchNorm module the running
 * mean ends as the equal-weight mean of the per-batch means, the running variance as the mean of
 * the per-batch unbiased variances, num_batches_tracked as the number of batches; momentum and the
 * training flags are as before (all modules get the root's flag back, as model.train(was_training)).
 *
 * TorchScript bakes `momentum` into the code, so it cannot be set to None for the replay. Instead,
 * before each batch every BatchNorm's running_mean and running_var are zeroed (and
 * num_batches_tracked, which makes a momentum=None module take the batch statistics whole); after
 * the forward each holds momentum x the batch statistic, which is summed in float64 and divided by
 * momentum x batches at the end. The momentum is the module's scripted constant or, for traced
 * modules, the constant in its aten::batch_norm call. A module the forward did not reach in a
 * batch adds nothing and counts no batch (num_batches_tracked tells); one never reached keeps
 * update_bn's reset values (mean 0, var 1, 0 batches). During the replay the statistics of all
 * modules are views into one flat buffer, so a batch's bookkeeping is a few tensor operations
 * whatever the number of modules, with no allocation.
 *
 * BatchNorm modules are told by class name (BatchNorm1d/2d/3d, SyncBatchNorm, subclasses with
 * BatchNorm in their name) or, for other classes, by holding running_mean, running_var and
 * num_batches_tracked buffers (but not InstanceNorm or FrozenBatchNorm, which update_bn skips).
 */
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/dataset/dataset.h"
#include "tensor/device.h"
#include "tensor/state_dict.h"

namespace torch::jit {
struct Module;
}
namespace c10 {
struct Device;
}

namespace swavg {

struct bn_options {
  int64_t batch_size = 32;
  bool drop_last = false;
  int64_t max_batches = 0;  // 0: all
  device_spec device;
  std::optional<dtype> input_type;  // default: the model's floating dtype for floating data
  bool progress = true;             // a progress bar when stderr is a terminal
};

struct bn_module_report {
  std::string name;  // "layer1.0.bn1"
  std::string type;  // "torch.nn.modules.batchnorm.BatchNorm2d"
  int64_t features = 0;
  std::optional<double> momentum;  // nullopt: momentum None (cumulative average)
  int64_t batches = 0;             // batches that reached it (its num_batches_tracked)
};

struct bn_report {
  std::string model;
  std::string data;
  std::string data_format;  // "npy", "torch", "safetensors", "raw"
  std::string data_key;
  std::vector<int64_t> sample_shape;
  dtype data_type = dtype::float32;
  dtype input_type = dtype::float32;  // what the model was fed
  int64_t samples = 0;                // samples replayed
  int64_t batches = 0;
  int64_t batch_size = 0;
  std::string device;
  std::vector<bn_module_report> modules;
  double seconds = 0.0;  // the replay alone
};

struct update_bn_result {
  std::vector<named_tensor> tensors;  // the model's state (CPU), in the layout `weights` came in
  bool averaged_layout = false;       // `weights` (and so `tensors`) were in averaged-model layout
  bn_report report;
  std::shared_ptr<torch::jit::Module> module;  // updated, for save_module() (save_module.h)
};

// Seam (defined in update_batchnorm.cpp; stand-in in without_libtorch.cpp): the whole job: load the model,
// load `weights` into it (either layout; empty: the model's own weights), replay `data`, return the
// updated state. `weights_source` names the weights in messages.
update_bn_result update_batchnorm(const std::string& model_path, const std::vector<named_tensor>& weights,
                                  const std::string& weights_source, const dataset& data, const bn_options& options);

// For src/libtorch/'s replays: the report's account of the data and the batches to replay (batches,
// samples, batch_size, device). Throws usage_error for --batch-size below 1 or a negative
// --max-batches, input_error for data that make no batch.
bn_report plan_batches(const dataset& data, const bn_options& o, const std::string& model_name,
                       const c10::Device& device);

// The replay alone, for src/libtorch/ and its tests: replays `data` through the module and leaves
// the recomputed statistics in its buffers; messages name the module `model_name`. The module ends
// on the CPU. A module without BatchNorm is left as it is (report.modules empty, no batch
// replayed). Throws usage_error (options, device), input_error (a module that cannot be updated,
// e.g. traced in eval mode) or mismatch_error (the forward rejects the data: the message shows the
// batch's shape and dtype).
bn_report replay_batchnorm(torch::jit::Module& module, const dataset& data, const bn_options& options,
                           const std::string& model_name = "the model");

}  // namespace swavg
