#include "fold/layout.h"

#include <cstring>

namespace swavg {
namespace {

bool has_module_prefix(const std::string& name) {
  return name.compare(0, std::strlen(kModulePrefix), kModulePrefix) == 0;
}

}  // namespace

std::optional<std::string> model_name_in_averaged_layout(const std::string& stored) {
  if (stored == kNAveraged) return std::nullopt;
  return has_module_prefix(stored) ? stored.substr(std::strlen(kModulePrefix)) : stored;
}

bool from_averaged_layout(std::vector<named_tensor>& tensors, std::optional<named_tensor>& n_averaged) {
  bool has_count = false, all_prefixed = true;
  for (const auto& t : tensors) {
    if (t.name == kNAveraged)
      has_count = true;
    else if (!has_module_prefix(t.name))
      all_prefixed = false;
  }
  if (!has_count || !all_prefixed || tensors.size() < 2) return false;
  std::vector<named_tensor> renamed;
  for (auto& t : tensors) {
    if (t.name == kNAveraged) {
      n_averaged = std::move(t);
      continue;
    }
    t.name = *model_name_in_averaged_layout(t.name);
    renamed.push_back(std::move(t));
  }
  tensors = std::move(renamed);
  return true;
}

void to_averaged_layout(std::vector<named_tensor>& tensors, named_tensor n_averaged) {
  for (auto& t : tensors) t.name = kModulePrefix + t.name;
  tensors.push_back(std::move(n_averaged));
}

}  // namespace swavg
