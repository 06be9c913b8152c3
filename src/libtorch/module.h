/*
 * TorchScript modules through LibTorch's jit loader, only for what must run a model (update-bn and
 * --save-module): the loader compiles and runs the archive's code. Reading TorchScript checkpoints
 * is formats/torch/torchscript.cpp's, without LibTorch. There is one torch::jit::load in swavg, in
 * load_module.
 */
#pragma once

#include <torch/csrc/jit/api/module.h>

#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensor/state_dict.h"

namespace swavg {

// Loads a TorchScript archive on the CPU. Throws input_error when LibTorch cannot load it.
std::shared_ptr<torch::jit::Module> load_module(const std::string& path);

// "a.b" from a prefix and a name ("" + "b" is "b").
std::string join(const std::string& prefix, const std::string& name);

// The module's parameters and buffers in state_dict() order: each module's own parameters, then
// its own buffers, then its children's.
std::vector<std::pair<std::string, at::Tensor>> state_of(const torch::jit::Module& m);

// The same as CPU tensor views (of the module's own tensors when it lives on the CPU), each marked
// parameter or buffer.
std::vector<named_tensor> module_state(const torch::jit::Module& module);

// The dtype of the module's first floating parameter (else buffer), if any.
std::optional<dtype> model_floating_type(const torch::jit::Module& m);

// The text of an exception from LibTorch: for TorchScript interpreter errors the original exception
// at the end, without the TorchScript traceback.
std::string error_text(const std::exception& e);

}  // namespace swavg
