/*
 * DeepSpeed checkpoints as inputs: a tag folder (`global_step<N>/`, as engine.save_checkpoint
 * writes it) or the folder above it whose `latest` file names the tag. Read as DeepSpeed's own
 * zero_to_fp32.py reads them, without running anything:
 *
 * - ZeRO stage 0, 1 and 2 (`mp_rank_00_model_states.pt`): the full weights are the `module` entry
 *   of that torch.save file; its other entries (optimizer, scheduler, config) are not weights.
 * - ZeRO-3 (`zero_pp_rank_<r>_mp_rank_00_model_states.pt` and `..._optim_states.pt` for each
 *   rank r): every parameter is split over the ranks' flat fp32 partitions (`fp32_flat_groups`).
 *   The parameters take ceil(numel / world size) elements each, one after the other in the order
 *   of `param_shapes`, in every rank's concatenated groups; a tensor is rank 0's slice, then rank
 *   1's, ..., cut to its numel (the padding is at the end). Frozen parameters are concatenated from
 *   each rank's `frozen_param_fragments`, buffers come from rank 0's `module` (`buffer_names`),
 *   tied parameters (`shared_params`) share their source's tensor. A tensor of several slices is a
 *   pieced view of them (tensor_view.h), assembled only when the fold reaches it.
 *
 * Everything read from the files is checked before use: the world size against the rank files
 * present, each rank's group sizes against rank 0's, the parameters' partitions against the
 * elements the groups hold, shapes against overflow.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/state_dict.h"

namespace swavg {

// The tag folder `path` names (itself, or the one its `latest` file names), "" when `path` is not
// a DeepSpeed checkpoint. Throws input_error for a `latest` that names no usable tag folder.
std::string deepspeed_tag_folder(const std::string& path);

// Reads the DeepSpeed checkpoint at `path` (tag folder or its parent). `key` must be empty or
// "module". Throws input_error naming the file and the parameter for anything malformed.
state_dict read_deepspeed_checkpoint(const std::string& path, const std::string& key);

// The files the checkpoint reads (and `latest`), for the output-path checks.
std::vector<std::string> deepspeed_files(const std::string& path);

// The ZeRO-3 arithmetic, exposed for tests. A parameter's place in every rank's flat partition.
struct zero3_param {
  uint64_t numel = 0;
  uint64_t partition_offset = 0;  // elements before it in each rank's concatenated groups
  uint64_t partition_numel = 0;   // ceil(numel / world_size)
};
// One piece of a tensor: `count` elements from rank `rank`'s group `group`, starting at `offset`.
struct zero3_slice {
  size_t rank = 0;
  size_t group = 0;
  uint64_t offset = 0;
  uint64_t count = 0;
};

// numel of `shape`; throws input_error (`what` names the file and parameter) for a negative size
// or a product past 2^63 - 1.
uint64_t zero3_numel(const std::vector<int64_t>& shape, const std::string& what);
// Places parameters of `numels` in groups of `group_numels` elements on each of `world_size`
// ranks. Throws input_error naming `file` (and the parameter in `names`) when the partitions take
// more or fewer elements than the groups hold.
std::vector<zero3_param> plan_zero3(const std::vector<uint64_t>& numels, const std::vector<std::string>& names,
                                    const std::vector<uint64_t>& group_numels, uint64_t world_size,
                                    const std::string& file);
// Where each group starts in a rank's concatenated groups, and (last) where the groups end; for
// groups plan_zero3 accepted (their sum fits 64 bits).
std::vector<uint64_t> zero3_group_starts(const std::vector<uint64_t>& group_numels);
// The pieces of one planned parameter, rank by rank, `numel` elements in all: its first group
// found by binary search, so that planning every parameter is O(P log G), not O(P x G).
std::vector<zero3_slice> zero3_slices(const zero3_param& p, const std::vector<uint64_t>& group_starts,
                                      uint64_t world_size);

}  // namespace swavg
