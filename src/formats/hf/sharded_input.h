/*
 * Sharded checkpoints as inputs: a Hugging Face folder (formats/hf/hf_index.h) or its index file read
 * as ONE state dict. The index is untrusted: its bytes are parsed and validated in one step
 * (parse_hf_index: a JSON object with a string -> string "weight_map", shard names that are plain
 * file names beside the index, an optional integer metadata.total_size) before any shard is opened.
 * Each shard is then read by the single-file readers, with every check they make, and checked
 * against the weight map: no shard missing, no tensor missing from its shard, none extra, none in
 * two shards. Tensors come in the order of the shard files as they first appear in the weight map,
 * each shard's own order inside; each view keeps its own shard's mapping.
 */
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/hf/hf_index.h"
#include "tensor/state_dict.h"
#include "util/paths.h"  // path_in_folder, which names the shards beside an index

namespace swavg {

constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 20;  // an index file larger than this is refused
constexpr size_t kMaxShardNameBytes = 255;               // NAME_MAX
constexpr size_t kMaxIndexTensorNameBytes = 4096;

// What a checkpoint argument names: a single file (index empty), or an index (file empty).
struct checkpoint_location {
  std::string file;   // the one file to read, or ""
  std::string index;  // the index file, or ""
  // The folder of a folder or index argument, or of a weight file given by its library's name in a
  // folder holding the library's config (c0/model.safetensors beside c0/config.json); "" for a plain file.
  std::string folder;
  // Whose file names the checkpoint has (a file or index named so: diffusion_pytorch_model.*,
  // adapter_model.*; transformers' otherwise): an output folder made from it keeps them.
  weights_naming names;  // with the variant of the files read ("" for none)
};

// Whether `path` is an index file by its name (ends in ".index.json").
bool is_index_name(const std::string& path);
// Resolves a folder to the index or single file its library loads (config.json's
// "transformers_weights", else from_pretrained's order for transformers' names, then diffusers',
// then PEFT's) and an index file to its folder. Throws input_error for a folder holding none, naming what it holds; for
// a diffusers pipeline (model_index.json, no weights of its own), naming its component folders to average.
checkpoint_location locate_checkpoint(const std::string& path);

// Validates an index's bytes. Throws input_error naming `path` with every problem found.
hf_index parse_hf_index(const std::string& path, std::string_view bytes);
hf_index read_hf_index(const std::string& path);
// The index's shard files, each once, in the order they first appear in the weight map.
std::vector<std::string> shard_names(const hf_index& index);

// Reads one shard file (any single-file format, with its own checks).
using shard_loader = std::function<state_dict(const std::string& path)>;
// The index's shards as one state dict, `path` as given. Throws input_error naming the index, the
// shard and the tensor.
state_dict load_sharded(const std::string& path, const std::string& index_path, const hf_index& index,
                        const shard_loader& load);

}  // namespace swavg
