#include "formats/hf_index.h"

#include <fmt/format.h>

namespace swavg {

const char* weights_names_name(weights_names names) {
  switch (names) {
    case weights_names::diffusers: return "diffusers";
    case weights_names::peft: return "peft";
    case weights_names::transformers: break;
  }
  return "transformers";
}

std::optional<weights_names> weights_names_from_name(const std::string& name) {
  for (const weights_names n : kAllWeightsNames)
    if (name == weights_names_name(n)) return n;
  return std::nullopt;
}

const char* weights_stem(file_format format, weights_names names) {
  switch (names) {
    case weights_names::diffusers: return "diffusion_pytorch_model";
    case weights_names::peft: return "adapter_model";
    case weights_names::transformers: break;
  }
  return format == file_format::safetensors ? "model" : "pytorch_model";
}

namespace {
const char* extension(file_format format) { return format == file_format::safetensors ? "safetensors" : "bin"; }
}  // namespace

std::string shard_file_name(file_format format, size_t k, size_t count, weights_names names) {
  return fmt::format("{}-{:05d}-of-{:05d}.{}", weights_stem(format, names), k, count, extension(format));
}

std::string index_file_name(file_format format, weights_names names) {
  return fmt::format("{}.{}{}", weights_stem(format, names), extension(format), kIndexSuffix);
}

std::string single_file_name(file_format format, weights_names names) {
  return fmt::format("{}.{}", weights_stem(format, names), extension(format));
}

}  // namespace swavg
