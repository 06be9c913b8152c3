/*
 * Hugging Face sharded checkpoints, as transformers' save_pretrained writes them: a folder of shard
 * files and an index, `{"metadata": {"total_size": N}, "weight_map": {tensor: shard file}}`, where
 * total_size is the bytes of tensor data in all shards. These names and this struct are shared by
 * the reader (sharded inputs: formats/hf/sharded_input) and the writer (sharded outputs, finalize:
 * formats/hf/sharded_output), so that what one writes the other reads.
 *
 * Three libraries' folders share that layout under other file names (weights_names): transformers'
 * model.safetensors / pytorch_model.bin, diffusers' diffusion_pytorch_model.{safetensors,bin} (a
 * model folder such as a pipeline's unet/) and PEFT's adapter_model.{safetensors,bin}. An output
 * folder keeps the names of the folder it was made from, so that the library that wrote the input
 * loads the output (UNet2DConditionModel.from_pretrained, PeftModel.from_pretrained).
 *
 * A variant (from_pretrained's and save_pretrained's `variant="fp16"`) is a word inserted before the
 * extension, as transformers' and diffusers' _add_variant do: model.fp16.safetensors, shards
 * model.fp16-00001-of-00002.safetensors, index model.safetensors.index.fp16.json. An output folder
 * keeps the input's variant, so that from_pretrained(out, variant="fp16") loads it.
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

// Whose file names a folder's weights have; the stems of the safetensors and torch.save files.
enum class weights_names { transformers, diffusers, peft };
inline constexpr weights_names kAllWeightsNames[] = {weights_names::transformers, weights_names::diffusers,
                                                     weights_names::peft};

// Whose names and which variant a folder's weight files have ("" for none).
struct weights_naming {
  weights_names names = weights_names::transformers;
  std::string variant;
  weights_naming(weights_names n = weights_names::transformers, std::string v = {})  // NOLINT: converts
      : names(n), variant(std::move(v)) {}
};

// A variant as the libraries name files with it: 1 to 64 of [A-Za-z0-9_] ("fp16", "non_ema"); no '-',
// which would make a shard's name ambiguous.
bool is_variant_name(const std::string& variant);

// "transformers", "diffusers", "peft" (the plan's "weights_names"), and back (nullopt for another).
const char* weights_names_name(weights_names names);
std::optional<weights_names> weights_names_from_name(const std::string& name);
// "model" / "pytorch_model", "diffusion_pytorch_model" (both), "adapter_model" (both).
const char* weights_stem(file_format format, weights_names names);

struct hf_index {
  std::optional<uint64_t> total_size;        // metadata.total_size, when present
  std::optional<uint64_t> total_parameters;  // metadata.total_parameters (transformers 5), when present
  std::vector<std::pair<std::string, std::string>> weight_map;  // tensor -> shard file, in the file's order
};

// "model-00001-of-00003.safetensors" (format safetensors), "pytorch_model-00001-of-00003.bin"
// (torch), "diffusion_pytorch_model-00001-of-00003.safetensors" (diffusers): k is 1-based; 5
// digits, more only when count needs them.
// With a variant: "model.fp16-00001-of-00003.safetensors".
std::string shard_file_name(file_format format, size_t k, size_t count, const weights_naming& naming = {});
// kSafetensorsIndexName or kTorchIndexName; "diffusion_pytorch_model.safetensors.index.json", ...;
// with a variant "model.safetensors.index.fp16.json".
std::string index_file_name(file_format format, const weights_naming& naming = {});
// kSafetensorsSingleName or kTorchSingleName; "diffusion_pytorch_model.safetensors", ...; with a
// variant "diffusion_pytorch_model.fp16.safetensors".
std::string single_file_name(file_format format, const weights_naming& naming = {});

// Whether a file name is an index: "*.index.json", or a variant's "*.index.<variant>.json".
bool is_index_file_name(const std::string& name);
// The library naming of a weight file name (single, index or shard of any library, with or
// without a variant), or nullopt for another name.
std::optional<std::pair<weights_naming, file_format>> naming_of_weight_file(const std::string& name);

}  // namespace swavg
