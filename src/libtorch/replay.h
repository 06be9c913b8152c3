/*
 * The LibTorch-level steps of update-bn (update_bn.h has the whole job): loading weights into a
 * TorchScript module and replaying data through it.
 */
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <string>
#include <vector>

#include "formats/dataset.h"
#include "libtorch/update_bn.h"
#include "tensor/state_dict.h"

namespace swavg {

// Copies `weights` (the model's names) into the module, converting dtypes as load_state_dict does.
// The running statistics of BatchNorm modules may be missing (they are recomputed). Throws
// mismatch_error listing missing and unexpected names, or naming a tensor whose shape differs;
// `source` (the checkpoint's path) starts messages.
void load_weights(torch::jit::Module& module, const std::vector<named_tensor>& weights, const std::string& source);

// Replays `data` through the module and leaves the recomputed statistics in its buffers; messages
// name the module `model_name`. The module ends on the CPU. A module without BatchNorm is left as
// it is (report.modules empty, no batch replayed). Throws usage_error (options, device),
// input_error (a module that cannot be updated, e.g. traced in eval mode) or mismatch_error (the
// forward rejects the data: the message shows the batch's shape and dtype).
bn_report update_bn(torch::jit::Module& module, const dataset& data, const bn_options& options,
                    const std::string& model_name = "the model");

}  // namespace swavg
