/*
 * --save-module: writing the TorchScript module update-bn updated, with torch.jit.save's format.
 * LibTorch-free, so that the CLI can include it. Seam: defined in save_module.cpp; its stand-in in
 * without_libtorch.cpp throws needs_libtorch.
 */
#pragma once

#include <cstdint>
#include <string>

namespace torch::jit {
struct Module;
}

namespace swavg {

// Writes the module with torch.jit.save's format, atomically. Returns the bytes written.
uint64_t save_module(const torch::jit::Module& module, const std::string& path);

}  // namespace swavg
