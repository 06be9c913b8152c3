/*
 * Loading a checkpoint's weights into a TorchScript module, as load_state_dict(strict=True) does,
 * except that BatchNorm statistics may be missing: update-bn recomputes them.
 */
#include <c10/core/GradMode.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <unordered_map>
#include <unordered_set>

#include "libtorch/batchnorm.h"
#include "libtorch/bn_weights.h"
#include "libtorch/module.h"
#include "libtorch/tensor_bridge.h"
#include "util/error.h"
#include "util/listing.h"

namespace swavg {

using torch::jit::Module;

void load_weights(Module& module, const std::vector<named_tensor>& weights, const std::string& source) {
  const auto targets = state_of(module);
  const std::set<std::string> batchnorms = batchnorm_names(module);
  std::unordered_map<std::string, const named_tensor*> given;
  for (const auto& w : weights) given.emplace(w.name, &w);
  std::vector<std::string> missing, unexpected;
  std::unordered_set<std::string> target_names;
  for (const auto& [name, t] : targets) {
    target_names.insert(name);
    if (given.count(name)) continue;
    const size_t dot = name.rfind('.');
    const std::string owner = dot == std::string::npos ? "" : name.substr(0, dot);
    if (is_stat_buffer(name.substr(dot + 1)) && batchnorms.count(owner)) {
      spdlog::debug("{}: has no '{}' (recomputed anyway)", source, name);
      continue;
    }
    missing.push_back(name);
  }
  for (const auto& w : weights)
    if (!target_names.count(w.name)) unexpected.push_back(w.name);
  if (!missing.empty() || !unexpected.empty())
    throw mismatch_error(
        fmt::format("{}: its tensor names do not match the model's: {} missing ({}), {} unexpected ({})", source,
                    missing.size(), quoted_list(missing), unexpected.size(), quoted_list(unexpected)));
  c10::NoGradGuard no_grad;
  for (const auto& [name, t] : targets) {
    auto it = given.find(name);
    if (it == given.end()) continue;
    const tensor_view& v = it->second->view;
    if (v.shape != t.sizes().vec())
      throw mismatch_error(fmt::format("{}: tensor '{}' has shape {} but the model expects {}", source, name,
                                       shape_string(v.shape), shape_string(t.sizes().vec())));
    try {
      at::Tensor target = t;
      target.copy_(to_tensor(v));
    } catch (const c10::Error& e) {
      throw mismatch_error(fmt::format("{}: tensor '{}' ({}) cannot be loaded into the model's {} tensor: {}", source,
                                       name, dtype_name(v.type), c10::toString(t.scalar_type()), error_text(e)));
    }
  }
}

}  // namespace swavg
