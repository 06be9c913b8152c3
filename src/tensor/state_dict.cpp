#include "tensor/state_dict.h"

#include <fmt/format.h>

#include <unordered_map>

#include "util/error.h"

namespace swavg {

const char* format_name(file_format f) {
  switch (f) {
    case file_format::torch: return "torch";
    case file_format::torchscript: return "torchscript";
    case file_format::safetensors: return "safetensors";
  }
  return "?";
}

const char* kind_name(tensor_kind k) {
  switch (k) {
    case tensor_kind::parameter: return "parameter";
    case tensor_kind::buffer: return "buffer";
    case tensor_kind::unknown: return "unknown";
  }
  return "?";
}

void strip_prefixes(state_dict& sd, const std::vector<std::string>& prefixes) {
  if (prefixes.empty()) return;
  std::unordered_map<std::string, std::string> original;  // stripped name -> name in the file
  for (auto& t : sd.tensors) {
    const std::string before = t.name;
    for (bool changed = true; changed;) {
      changed = false;
      for (const auto& p : prefixes) {
        if (!p.empty() && t.name.size() > p.size() && t.name.compare(0, p.size(), p) == 0) {
          t.name.erase(0, p.size());
          changed = true;
        }
      }
    }
    auto [it, fresh] = original.emplace(t.name, before);
    if (!fresh)
      throw input_error(
          fmt::format("{}: stripping prefixes makes '{}' and '{}' both '{}'", sd.path, it->second, before, t.name));
  }
}

}  // namespace swavg
