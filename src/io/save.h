/*
 * Writes a state dict as torch.save or safetensors, atomically. The format comes from --format or,
 * failing that, the output's extension (.safetensors; anything else is torch.save).
 */
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/state_dict.h"

namespace swavg {

enum class output_format { torch, safetensors };

// `requested` is "", "torch" or "safetensors"; throws usage_error for anything else.
output_format choose_output_format(const std::string& path, const std::string& requested);

// Tensors may be strided views; safetensors gets them contiguous, torch.save keeps storages shared.
// `metadata` goes to safetensors' __metadata__ or to a swavg.json record in the torch archive,
// where loaders ignore it. Returns the number of bytes written.
uint64_t save_state_dict(const std::string& path, const std::vector<named_tensor>& tensors, output_format format,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace swavg
