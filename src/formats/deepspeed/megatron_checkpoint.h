/*
 * Megatron-core distributed checkpoints (megatron.core.dist_checkpointing): a folder whose
 * `metadata.json` is the CheckpointingConfig dist_checkpointing.save writes last, a JSON object
 * naming the sharded backend ({"sharded_backend": "torch_dist", "sharded_backend_version": 1};
 * "zarr" in old ones). With torch_dist the tensors are PyTorch DCP files (.metadata,
 * __<rank>_<n>.distcp); the non-sharded ("common") state is common.pt, a torch.save file written
 * first, in checkpoints of megatron-core before NVIDIA/Megatron-LM#5160 (whose metadata.json also
 * has common_backend fields), and since then a "common_state" item among the DCP items, no
 * common.pt. swavg does not read them: its input table (formats/io/input_kinds.h) claims such a folder
 * by its metadata.json beside DCP's .metadata or a common.pt, before DCP (a torch_dist folder is a
 * DCP folder too), and refuses it, named, with what to do, instead of averaging it without its common state.
 */
#pragma once

#include <optional>
#include <string>

namespace swavg {

// The sharded backend a Megatron-core checkpoint folder names in its metadata.json ("torch_dist",
// "zarr", ...; "" when it names an empty one), nullopt when `path` is not such a folder (no
// metadata.json, or no .metadata or common.pt beside it: another folder's metadata.json is never
// read). Throws input_error for such a folder's metadata.json over 1 MiB.
std::optional<std::string> megatron_backend(const std::string& path);

// Throws input_error naming the layout and what to do when `path` is a Megatron-core checkpoint folder.
void refuse_megatron_checkpoint(const std::string& path);

}  // namespace swavg
