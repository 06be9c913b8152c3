/*
 * Sharded outputs' layout: shard sizes parsed, tensors packed, the index written (shard_layout.h).
 */
#include "formats/hf/shard_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "formats/hf/hf_index.h"
#include "formats/torch/torch_file.h"
#include "util/checked.h"
#include "util/error.h"

namespace swavg {
namespace {

constexpr uint64_t kMaxShardSize = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

struct size_unit {
  const char* suffix;  // upper case
  uint64_t factor;
  bool decimal;  // a lowercase final 'b' means bits, as in transformers
};

constexpr size_unit kUnits[] = {
    {"TIB", uint64_t(1) << 40, false}, {"GIB", uint64_t(1) << 30, false},
    {"MIB", uint64_t(1) << 20, false}, {"KIB", uint64_t(1) << 10, false},
    {"TB", 1'000'000'000'000, true},   {"GB", 1'000'000'000, true},
    {"MB", 1'000'000, true},           {"KB", 1'000, true},
};

bool ends_with_upper(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  if (s.size() < n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::toupper(static_cast<unsigned char>(s[s.size() - n + i])) != suffix[i]) return false;
  return true;
}

uint64_t tensor_bytes(const tensor_spec& t) {
  std::optional<uint64_t> n = itemsize(t.type);
  for (int64_t d : t.shape) n = n ? checked_mul(*n, static_cast<uint64_t>(d)) : std::nullopt;
  if (!n) throw input_error(fmt::format("tensor '{}': its size overflows", t.name));
  return *n;
}

file_format as_file_format(output_format f) {
  return f == output_format::safetensors ? file_format::safetensors : file_format::torch;
}

}  // namespace

uint64_t parse_shard_size(const std::string& text, const std::string& option) {
  auto bad = [&](const std::string& why) {
    return usage_error(fmt::format("{} {}: {} (a size such as 5GB, 500MB, 2MiB or a number of bytes)", option,
                                   text.empty() ? "''" : text, why));
  };
  std::string number = text;
  uint64_t factor = 1;
  bool bits = false;
  for (const auto& u : kUnits)
    if (ends_with_upper(text, u.suffix)) {
      number = text.substr(0, text.size() - std::char_traits<char>::length(u.suffix));
      factor = u.factor;
      bits = u.decimal && text.back() == 'b';
      break;
    }
  const size_t dot = number.find('.');
  const std::string whole = number.substr(0, dot);
  const std::string fraction = dot == std::string::npos ? "" : number.substr(dot + 1);
  auto digits = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (whole.empty() || !digits(whole) || !digits(fraction) || (dot != std::string::npos && fraction.empty()))
    throw bad("not a size");
  // value = (whole . fraction) * factor / (bits ? 8 : 1), exactly.
  std::optional<uint64_t> scaled = 0;
  uint64_t divisor = bits ? 8 : 1;
  for (char c : whole + fraction) {
    scaled = scaled ? checked_mul(*scaled, 10) : std::nullopt;
    scaled = scaled ? checked_add(*scaled, static_cast<uint64_t>(c - '0')) : std::nullopt;
  }
  for (size_t i = 0; i < fraction.size() && divisor != 0; ++i) {
    auto d = checked_mul(divisor, 10);
    divisor = d ? *d : 0;
  }
  if (divisor == 0) throw bad("too many digits");
  // Reduce factor / divisor before multiplying, so that 1.5GB does not overflow on the way.
  const uint64_t common = std::gcd(factor, divisor);
  const uint64_t f = factor / common, g = divisor / common;
  if (!scaled) throw bad("too large");
  if (*scaled % g != 0) throw bad("not a whole number of bytes");
  const std::optional<uint64_t> bytes = checked_mul(*scaled / g, f);
  if (!bytes || *bytes > kMaxShardSize) throw bad(fmt::format("too large (at most {} bytes)", kMaxShardSize));
  if (*bytes == 0) throw bad("must be at least 1 byte");
  return *bytes;
}

std::vector<std::vector<size_t>> pack_shards(const std::vector<uint64_t>& sizes, uint64_t limit) {
  std::vector<std::vector<size_t>> shards;
  uint64_t current = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool fits = sizes[i] <= limit && current <= limit - sizes[i];
    if (shards.empty() || (!fits && !shards.back().empty())) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(i);
    current += sizes[i];
  }
  return shards;
}

shard_layout plan_layout(output_format format, std::vector<tensor_spec> specs, uint64_t max_shard_size,
                         const weights_naming& names) {
  shard_layout layout;
  layout.format = format;
  layout.max_shard_size = max_shard_size;
  layout.specs = std::move(specs);
  std::vector<uint64_t> sizes;
  sizes.reserve(layout.specs.size());
  for (const auto& t : layout.specs) {
    sizes.push_back(tensor_bytes(t));
    const auto total = checked_add(layout.total_size, sizes.back());
    if (!total) throw input_error("the output's size overflows");
    layout.total_size = *total;
  }
  const auto packed = pack_shards(sizes, max_shard_size);
  for (size_t k = 0; k < packed.size(); ++k) {
    output_shard s;
    s.file = packed.size() == 1 ? single_file_name(as_file_format(format), names)
                                : shard_file_name(as_file_format(format), k + 1, packed.size(), names);
    s.specs = packed[k];
    for (size_t i : s.specs) s.bytes += sizes[i];
    layout.shards.push_back(std::move(s));
  }
  return layout;
}

std::string output_index_name(output_format format, const weights_naming& names) {
  return index_file_name(as_file_format(format), names);
}

std::string index_json(const shard_layout& layout, std::optional<uint64_t> total_parameters) {
  nlohmann::json weight_map = nlohmann::json::object();
  for (const auto& s : layout.shards)
    for (size_t i : s.specs) weight_map[layout.specs[i].name] = s.file;
  nlohmann::json metadata = {{"total_size", layout.total_size}};
  if (total_parameters) metadata["total_parameters"] = *total_parameters;
  nlohmann::json j = {{"metadata", metadata}, {"weight_map", weight_map}};
  return j.dump(2, ' ', /*ensure_ascii=*/true) + "\n";
}

}  // namespace swavg
