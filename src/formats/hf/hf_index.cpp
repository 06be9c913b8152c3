#include "formats/hf/hf_index.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/text.h"

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

bool is_variant_name(const std::string& variant) {
  if (variant.empty() || variant.size() > 64) return false;
  return std::all_of(variant.begin(), variant.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

namespace {

const char* extension(file_format format) { return format == file_format::safetensors ? "safetensors" : "bin"; }

std::string dot_variant(const weights_naming& naming) { return naming.variant.empty() ? "" : "." + naming.variant; }

// "-00001-of-00003" (5 digits or more each), the whole of `s`.
bool is_shard_suffix(const std::string& s) {
  const size_t of = s.find("-of-");
  if (s.empty() || s[0] != '-' || of == std::string::npos) return false;
  const auto digits = [](const std::string& d) {
    return d.size() >= 5 && std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(s.substr(1, of - 1)) && digits(s.substr(of + 4));
}

}  // namespace

std::string shard_file_name(file_format format, size_t k, size_t count, const weights_naming& naming) {
  return fmt::format("{}{}-{:05d}-of-{:05d}.{}", weights_stem(format, naming.names), dot_variant(naming), k, count,
                     extension(format));
}

std::string index_file_name(file_format format, const weights_naming& naming) {
  return fmt::format("{}.{}.index{}.json", weights_stem(format, naming.names), extension(format), dot_variant(naming));
}

std::string single_file_name(file_format format, const weights_naming& naming) {
  return fmt::format("{}{}.{}", weights_stem(format, naming.names), dot_variant(naming), extension(format));
}

bool is_index_file_name(const std::string& name) {
  if (ends_with(name, kIndexSuffix)) return true;
  const size_t index = name.rfind(".index.");
  if (index == std::string::npos || !ends_with(name, ".json")) return false;
  const size_t start = index + 7, end = name.size() - 5;
  return end > start && is_variant_name(name.substr(start, end - start));
}

std::optional<std::pair<weights_naming, file_format>> naming_of_weight_file(const std::string& name) {
  for (const weights_names n : kAllWeightsNames)
    for (const file_format f : {file_format::safetensors, file_format::torch}) {
      const std::string stem = weights_stem(f, n), ext = std::string(".") + extension(f);
      if (!starts_with(name, stem)) continue;
      std::string rest = name.substr(stem.size());  // ".fp16.safetensors", "-00001-of-00002.bin", ...
      if (rest == ext || rest == ext + kIndexSuffix) return std::make_pair(weights_naming(n), f);
      if (starts_with(rest, ext + ".index.") && ends_with(rest, ".json")) {  // a variant's index
        const std::string v = rest.substr(ext.size() + 7, rest.size() - ext.size() - 7 - 5);
        if (is_variant_name(v)) return std::make_pair(weights_naming(n, v), f);
        continue;
      }
      if (!ends_with(rest, ext)) continue;
      rest = rest.substr(0, rest.size() - ext.size());  // "", ".fp16", "-00001-of-00002", ".fp16-00001-of-00002"
      const size_t dash = rest.find('-');
      const std::string shard = dash == std::string::npos ? "" : rest.substr(dash);
      const std::string variant_part = dash == std::string::npos ? rest : rest.substr(0, dash);
      if (!shard.empty() && !is_shard_suffix(shard)) continue;
      if (variant_part.empty()) return std::make_pair(weights_naming(n), f);
      if (variant_part[0] == '.' && is_variant_name(variant_part.substr(1)))
        return std::make_pair(weights_naming(n, variant_part.substr(1)), f);
    }
  return std::nullopt;
}

}  // namespace swavg
