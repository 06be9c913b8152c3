/*
 * TorchScript archives (torch.jit.save) are programs: they are loaded through LibTorch's jit
 * loader, which is what tells parameters from buffers. Tensors are listed in state_dict() order:
 * each module's own parameters, then its own buffers, then its children.
 *
 * Seam: defined in src/libtorch/torchscript.cpp; the stand-in in src/libtorch/without_libtorch.cpp
 * throws needs_libtorch.
 */
#pragma once

#include <string>

#include "tensor/state_dict.h"

namespace swavg {

// Throws input_error when LibTorch cannot load the archive.
state_dict read_torchscript(const std::string& path);

}  // namespace swavg
