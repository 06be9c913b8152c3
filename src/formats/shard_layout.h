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

#include "formats/hf_index.h"
#include "formats/save.h"

namespace swavg {

inline constexpr uint64_t kDefaultMaxShardSize = 5'000'000'000;  // "5GB", transformers' default

// --max-shard-size: "5GB", "500MB", "2MB", "1.5GB", "123" (bytes); KB/MB/GB/TB are powers of 10,
// KiB/MiB/GiB/TiB powers of 2, case-insensitive. usage_error naming `option` for 0, a negative or
// malformed size, or one past 2^63.
uint64_t parse_shard_size(const std::string& text, const std::string& option = "--max-shard-size");

// Shards as lists of indices into `sizes`, packed as said above.
std::vector<std::vector<size_t>> pack_shards(const std::vector<uint64_t>& sizes, uint64_t limit);

struct output_shard {
  std::string file;
  std::vector<size_t> specs;  // indices of the tensors it holds
  uint64_t bytes = 0;         // their data
  uint64_t file_size = 0;     // the file's exact size where the plan fixes it (dcp's rank files), else 0
};

struct shard_layout {
  output_format format = output_format::safetensors;
  uint64_t max_shard_size = kDefaultMaxShardSize;
  std::vector<tensor_spec> specs;  // every tensor of the output, in order
  std::vector<output_shard> shards;
  uint64_t total_size = 0;
  weights_naming names;  // the file names: the input folder's library and variant
  // The index's metadata.total_parameters, as transformers 5 writes it (the model's parameter count):
  // taken from the input folder's index when the output holds exactly its tensors; else left out.
  std::optional<uint64_t> total_parameters;
  bool indexed() const { return shards.size() > 1; }
};

shard_layout plan_layout(output_format format, std::vector<tensor_spec> specs, uint64_t max_shard_size,
                         const weights_naming& names = {});

// 0-based shard s belongs to worker s mod count.
inline bool worker_owns(size_t shard, size_t index, size_t count) { return shard % count == index; }

// Which of layout.specs worker `index` of `count` writes: those in any of its shards (a DCP tensor
// spans several rank files, so several workers write parts of it). The sinks and --dry-run ask here.
inline std::vector<bool> specs_owned(const shard_layout& layout, size_t index, size_t count) {
  std::vector<bool> owned(layout.specs.size());
  for (size_t s = 0; s < layout.shards.size(); ++s)
    if (worker_owns(s, index, count))
      for (size_t i : layout.shards[s].specs) owned.at(i) = true;
  return owned;
}

// A file written into an output folder: its name there, size and (when hashed) SHA-256.
struct written_file {
  std::string name;  // inside the output folder
  uint64_t size = 0;
  std::string sha256;
};

// The index, byte for byte as transformers writes it: json.dumps({"metadata": {"total_parameters": P,
// "total_size": N}, "weight_map": {...}}, indent=2, sort_keys=True) + "\n" (total_parameters only when
// the layout carries it).
std::string index_json(const shard_layout& layout);
std::string output_index_name(output_format format, const weights_naming& names = {});

// What --dry-run shows of the layout's files: shard `s`'s size (exact for safetensors and dcp, a
// bound for torch.save) with `metadata` in it, and the index written beside the shards ("" if none;
// `.metadata` for dcp).
planned_size planned_shard_size(const std::string& folder, const shard_layout& layout, size_t s,
                                const std::map<std::string, std::string>& metadata);
std::string planned_index_name(const shard_layout& layout);

// Writes the index of `layout` into `folder`, atomically, and returns it, hashed.
written_file write_index(const std::string& folder, const shard_layout& layout);

}  // namespace swavg
