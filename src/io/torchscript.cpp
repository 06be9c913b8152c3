#include "io/torchscript.h"

#include <torch/csrc/jit/serialization/import.h>

#include "core/tensor_bridge.h"
#include "util/error.h"

namespace swavg {
namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

void collect(const torch::jit::Module& m, const std::string& prefix, const std::shared_ptr<const void>& owner,
             std::vector<named_tensor>& out) {
  for (const auto& p : m.named_parameters(/*recurse=*/false))
    out.push_back(named_tensor{prefix + p.name, from_tensor(p.value.detach(), owner), tensor_kind::parameter});
  for (const auto& b : m.named_buffers(/*recurse=*/false))
    out.push_back(named_tensor{prefix + b.name, from_tensor(b.value.detach(), owner), tensor_kind::buffer});
  for (const auto& c : m.named_children()) collect(c.value, prefix + c.name + ".", owner, out);
}

}  // namespace

state_dict read_torchscript(const std::string& path) {
  auto module = std::make_shared<torch::jit::Module>();
  try {
    *module = torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    throw input_error(path + ": cannot load TorchScript archive: " + first_line(e.what_without_backtrace()));
  }
  state_dict sd;
  sd.path = path;
  sd.format = file_format::torchscript;
  collect(*module, "", module, sd.tensors);
  return sd;
}

}  // namespace swavg
