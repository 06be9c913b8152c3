#include "formats/hf_index.h"

#include <fmt/format.h>

namespace swavg {

std::string shard_file_name(file_format format, size_t k, size_t count) {
  const bool st = format == file_format::safetensors;
  return fmt::format("{}-{:05d}-of-{:05d}.{}", st ? "model" : "pytorch_model", k, count, st ? "safetensors" : "bin");
}

const char* index_file_name(file_format format) {
  return format == file_format::safetensors ? kSafetensorsIndexName : kTorchIndexName;
}

}  // namespace swavg
