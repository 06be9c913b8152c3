/*
 * A PyTorch Distributed Checkpoint (DCP) folder read as one checkpoint: `.metadata`
 * (formats/dcp/dcp_metadata.h) says which chunks make each tensor and where each chunk lies; every
 * chunk is a torch.save archive at a recorded offset and length inside a `__<rank>_<n>.distcp` file
 * (torch.distributed.checkpoint.FileSystemWriter), read memory-mapped through the torch.save
 * reader's checks, and must hold the declared dtype and the chunk's sizes.
 *
 * A tensor saved as one chunk (one process, a replicated tensor, a Shard(0) piece that is the
 * whole tensor) is a zero-copy view into its .distcp file; a tensor of several chunks (Shard(0),
 * Shard(1), uneven) is assembled into one buffer of its own at load. Nested state
 * ({"model": ..., "optimizer": ...}, flattened to FQNs) is selected with --key as for torch.save
 * files ("model" takes every FQN under "model." and strips it); non-tensor values
 * (BytesStorageMetadata) under the key are carried as pickle data, as torch.save's are.
 */
#pragma once

#include <string>
#include <vector>

#include "tensor/state_dict.h"

namespace swavg {

// True when `path` is a folder holding a `.metadata` file.
bool is_dcp_folder(const std::string& path);

// Reads the DCP folder at `folder`; `key` as load_options::key. Throws input_error for anything
// malformed (naming the tensor, the chunk and the file), usage_error for a key that selects nothing.
state_dict read_dcp_folder(const std::string& folder, const std::string& key);

// `.metadata` and every .distcp file it refers to, for the output-path checks.
std::vector<std::string> dcp_files(const std::string& folder);

}  // namespace swavg
