/*
 * Megatron-core distributed checkpoints (megatron.core.dist_checkpointing): a folder with
 * `metadata.json` naming the sharded backend ("torch_dist": PyTorch DCP files; "zarr") and
 * `common.pt` (the non-sharded state), as dist_checkpointing.save writes them (common.pt first,
 * metadata.json last). swavg does not read them; it recognises the layout, both files present,
 * before any other (a torch_dist folder is a DCP folder too) so that such a folder is refused,
 * named, with what to do, instead of being averaged without its common.pt.
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
