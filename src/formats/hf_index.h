/*
 * Hugging Face sharded checkpoints, as transformers' save_pretrained writes them: a folder of shard
 * files and an index, `{"metadata": {"total_size": N}, "weight_map": {tensor: shard file}}`, where
 * total_size is the bytes of tensor data in all shards. These names and this struct are shared by
 * the reader (sharded inputs: formats/sharded_input) and the writer (sharded outputs, finalize:
 * formats/sharded_output), so that what one writes the other reads.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tensor/state_dict.h"

namespace swavg {

inline constexpr const char* kSafetensorsIndexName = "model.safetensors.index.json";
inline constexpr const char* kTorchIndexName = "pytorch_model.bin.index.json";
inline constexpr const char* kSafetensorsSingleName = "model.safetensors";
inline constexpr const char* kTorchSingleName = "pytorch_model.bin";
// Index file names end so: "model.safetensors.index.json", "pytorch_model.bin.index.json".
inline constexpr const char* kIndexSuffix = ".index.json";
// The folder shard-parallel workers write into before `swavg finalize` publishes it: OUT + this.
inline constexpr const char* kPartialSuffix = ".partial";

struct hf_index {
  std::optional<uint64_t> total_size;                          // metadata.total_size, when present
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor -> shard file, in the file's order
};

// "model-00001-of-00003.safetensors" (format safetensors), "pytorch_model-00001-of-00003.bin"
// (torch): k is 1-based; 5 digits, more only when count needs them.
std::string shard_file_name(file_format format, size_t k, size_t count);
// kSafetensorsIndexName or kTorchIndexName.
const char* index_file_name(file_format format);

}  // namespace swavg
