/*
 * The layout of a sharded output: a Hugging Face folder of shards and an index, as transformers'
 * save_pretrained writes it. Sizes (--max-shard-size) are parsed here, tensors packed into shards
 * and the index written.
 *
 * Packing (pack_shards): greedy in the tensors' order; a tensor joins the current shard unless that
 * would pass the limit and the shard is not empty, so a tensor larger than the limit gets a shard of
 * its own. Sizes are tensor data bytes, as transformers counts them. One shard is written as the
 * single file (model.safetensors, pytorch_model.bin) with no index.
 *
 * Shard-parallel runs: output shard k (1-based) belongs to worker (k - 1) mod N (worker_files.h).
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "formats/core/folder_writer.h"
#include "formats/hf/hf_index.h"

namespace swavg {

inline constexpr uint64_t kDefaultMaxShardSize = 5'000'000'000;  // "5GB", transformers' default

// --max-shard-size: "5GB", "500MB", "2MB", "1.5GB", "123" (bytes); KB/MB/GB/TB are powers of 10,
// KiB/MiB/GiB/TiB powers of 2, case-insensitive. usage_error naming `option` for 0, a negative or
// malformed size, or one past 2^63.
uint64_t parse_shard_size(const std::string& text, const std::string& option = "--max-shard-size");

// Shards as lists of indices into `sizes`, packed as said above.
std::vector<std::vector<size_t>> pack_shards(const std::vector<uint64_t>& sizes, uint64_t limit);

// The shards of `specs` named as `names`, with no index (hf_folder_writer adds it).
shard_layout plan_layout(output_format format, std::vector<tensor_spec> specs, uint64_t max_shard_size,
                         const weights_naming& names = {});

// The index, byte for byte as transformers writes it: json.dumps({"metadata": {"total_parameters": P,
// "total_size": N}, "weight_map": {...}}, indent=2, sort_keys=True) + "\n" (total_parameters only when
// given).
std::string index_json(const shard_layout& layout, std::optional<uint64_t> total_parameters = std::nullopt);
std::string output_index_name(output_format format, const weights_naming& names = {});

}  // namespace swavg
