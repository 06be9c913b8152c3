/*
 * Loading a checkpoint's weights into a TorchScript module for update-bn (bn_weights.cpp), as
 * load_state_dict(strict=True) does, except that BatchNorm statistics may be missing.
 */
#pragma once

#include <string>
#include <vector>

#include "tensor/state_dict.h"

namespace torch::jit {
struct Module;
}

namespace swavg {

// Copies `weights` (the model's names) into the module, converting dtypes as load_state_dict does.
// The running statistics of BatchNorm modules may be missing (they are recomputed). Throws
// mismatch_error listing missing and unexpected names, or naming a tensor whose shape differs;
// `source` (the checkpoint's path) starts messages.
void load_weights(torch::jit::Module& module, const std::vector<named_tensor>& weights, const std::string& source);

}  // namespace swavg
