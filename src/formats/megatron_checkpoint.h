/*
 * Megatron-core distributed checkpoints (megatron.core.dist_checkpointing): a folder with
 * `metadata.json` naming the sharded backend ("torch_dist": PyTorch DCP files; "zarr") and
 * `common.pt` (the non-sharded state). swavg does not read them itself; it recognises the layout
 * so that such a folder gets an error that names it instead of "no checkpoint here".
 */
#pragma once

#include <string>

namespace swavg {

// The sharded backend a Megatron-core checkpoint folder names in its metadata.json ("torch_dist",
// "zarr", ...), "" when `path` is not such a folder.
std::string megatron_backend(const std::string& path);

// Throws input_error naming the layout when `path` is a Megatron-core checkpoint folder.
void refuse_megatron_checkpoint(const std::string& path);

}  // namespace swavg
