#include "libtorch/batchnorm.h"

#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>

#include <fmt/format.h>

#include <unordered_set>

#include "util/error.h"

namespace swavg {
namespace {

using torch::jit::Module;

const char* const kStatBuffers[] = {"running_mean", "running_var", "num_batches_tracked"};

// Removes each "___torch_mangle_<digits>." (one pass, no regex: names come from the file).
std::string strip_mangling(const std::string& qualified) {
  static const std::string kMangle = "___torch_mangle_";
  std::string out;
  size_t i = 0;
  while (i < qualified.size()) {
    const size_t at = qualified.find(kMangle, i);
    if (at == std::string::npos) break;
    size_t end = at + kMangle.size();
    while (end < qualified.size() && qualified[end] >= '0' && qualified[end] <= '9') ++end;
    const bool mangled = end > at + kMangle.size() && end < qualified.size() && qualified[end] == '.';
    out.append(qualified, i, at - i);
    if (!mangled) out.append(qualified, at, end - at);
    i = mangled ? end + 1 : end;
  }
  out.append(qualified, std::min(i, qualified.size()), std::string::npos);
  return out;
}

// "__torch__.torch.nn.modules.batchnorm.___torch_mangle_3.BatchNorm2d" -> "torch.nn.modules.batchnorm.BatchNorm2d"
std::string type_name(const Module& m) {
  const auto& name = m.type()->name();
  if (!name) return "?";
  std::string s = strip_mangling(name->qualifiedName());
  const std::string torch_prefix = "__torch__.";
  if (s.compare(0, torch_prefix.size(), torch_prefix) == 0) s = s.substr(torch_prefix.size());
  return s;
}

std::string class_name(const std::string& qualified) {
  const size_t dot = qualified.rfind('.');
  return dot == std::string::npos ? qualified : qualified.substr(dot + 1);
}

std::optional<at::Tensor> own_buffer(const Module& m, const std::string& name) {
  for (const auto& b : m.named_buffers(/*recurse=*/false))
    if (b.name == name) return b.value;
  return std::nullopt;
}

bool is_batchnorm(const Module& m, const std::string& type) {
  const std::string cls = class_name(type);
  if (cls.find("InstanceNorm") != std::string::npos || cls.find("Frozen") != std::string::npos) return false;
  if (!own_buffer(m, "running_mean") || !own_buffer(m, "running_var")) return false;
  return cls.find("BatchNorm") != std::string::npos || own_buffer(m, "num_batches_tracked").has_value();
}

// The momentum a BatchNorm module's forward applies: its scripted constant, an attribute, or the
// constant in a traced module's aten::batch_norm call.
std::optional<double> momentum_of(const Module& m, const std::string& name, const std::string& model_path) {
  auto from_value = [&](const c10::IValue& v) -> std::optional<std::optional<double>> {
    if (v.isNone()) return std::optional<double>{};
    if (v.isDouble()) return std::optional<double>{v.toDouble()};
    if (v.isInt()) return std::optional<double>{static_cast<double>(v.toInt())};
    return std::nullopt;
  };
  if (auto c = m.type()->findConstant("momentum"))
    if (auto v = from_value(*c)) return *v;
  if (m.hasattr("momentum"))
    if (auto v = from_value(m.attr("momentum"))) return *v;
  if (auto forward = m.find_method("forward")) {
    static const auto kBatchNorm = c10::Symbol::fromQualString("aten::batch_norm");
    for (const torch::jit::Node* node : forward->graph()->nodes()) {
      if (node->kind() != kBatchNorm || node->inputs().size() < 7) continue;
      auto training = torch::jit::toIValue(node->input(5));
      if (training && training->isBool() && !training->toBool())
        throw input_error(fmt::format(
            "{}: BatchNorm '{}' was traced in eval mode: training=False is baked into its code, so replaying data "
            "cannot update its statistics; trace the model after model.train(), or script it",
            model_path, name));
      if (auto v = torch::jit::toIValue(node->input(6)))
        if (auto momentum = from_value(*v)) return *momentum;
    }
  }
  throw input_error(fmt::format(
      "{}: cannot tell the momentum of BatchNorm module '{}' (no 'momentum' constant or attribute, no aten::batch_norm "
      "call with a constant momentum)",
      model_path, name));
}

}  // namespace

bool is_stat_buffer(const std::string& leaf) {
  for (const char* b : kStatBuffers)
    if (leaf == b) return true;
  return false;
}

std::vector<bn_slot> find_batchnorms(const Module& root, const std::string& model_path) {
  std::vector<bn_slot> slots;
  std::unordered_set<const void*> seen;
  for (const auto& nm : root.named_modules()) {
    const std::string type = type_name(nm.value);
    if (!is_batchnorm(nm.value, type) || !seen.insert(nm.value._ivalue().get()).second) continue;
    bn_slot s;
    s.name = nm.name;
    s.type = type;
    s.module = nm.value;
    s.mean = *own_buffer(nm.value, "running_mean");
    s.var = *own_buffer(nm.value, "running_var");
    if (auto c = own_buffer(nm.value, "num_batches_tracked")) s.count = *c;
    s.momentum = momentum_of(nm.value, s.name.empty() ? "<root>" : s.name, model_path);
    if (s.momentum && *s.momentum == 0.0)
      throw input_error(
          fmt::format("{}: BatchNorm '{}' has momentum 0: its statistics never change", model_path, s.name));
    if (!s.momentum && !s.count.defined())
      throw input_error(
          fmt::format("{}: BatchNorm '{}' has momentum None but no num_batches_tracked buffer", model_path, s.name));
    slots.push_back(std::move(s));
  }
  return slots;
}

std::set<std::string> batchnorm_names(const Module& root) {
  std::set<std::string> names;
  for (const auto& nm : root.named_modules())
    if (is_batchnorm(nm.value, type_name(nm.value))) names.insert(nm.name);
  return names;
}

}  // namespace swavg
