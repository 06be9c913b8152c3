/*
 * TorchScript through LibTorch, only where a model must run (update-bn, --save-module, --avg-fn):
 * loading an archive and reading the state of the loaded module (module.h); saving one is
 * save_module.cpp's. Reading TorchScript checkpoints (inspect, convert, average, ema, --model) is
 * formats/torch/torchscript.cpp's, which runs nothing.
 */
#include <c10/util/Exception.h>
#include <caffe2/serialize/read_adapter_interface.h>
#include <torch/csrc/jit/serialization/import.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "libtorch/module.h"
#include "libtorch/tensor_bridge.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace swavg {
namespace {

using torch::jit::Module;

void collect_state(const Module& m, const std::string& prefix, std::vector<std::pair<std::string, at::Tensor>>& out) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) out.emplace_back(join(prefix, p.name), p.value);
  for (const auto& b : m.named_buffers(/*recurse=*/false)) out.emplace_back(join(prefix, b.name), b.value);
  for (const auto& c : m.named_children()) collect_state(c.value, join(prefix, c.name), out);
}

// LibTorch reads the archive from swavg's mapping of it, never from the path: the file is opened
// once, as a regular file (util/regular_file.h), so a FIFO or a device named as a model or a
// function is refused instead of blocking or streaming forever.
class mapped_reader : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit mapped_reader(std::shared_ptr<const mapped_file> file) : file_(std::move(file)) {}
  size_t size() const override { return file_->size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char*) const override {
    if (pos >= file_->size()) return 0;
    const size_t count = std::min<uint64_t>(n, file_->size() - pos);
    std::memcpy(buf, file_->data() + pos, count);
    return count;
  }

 private:
  std::shared_ptr<const mapped_file> file_;
};

}  // namespace

std::shared_ptr<Module> load_module(const std::string& path) {
  auto module = std::make_shared<Module>();
  auto reader = std::make_shared<mapped_reader>(mapped_file::open(path));
  try {
    *module = torch::jit::load(reader, c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw input_error(fmt::format("{}: cannot load TorchScript archive: {}", path, what.substr(0, what.find('\n'))));
  }
  return module;
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::vector<std::pair<std::string, at::Tensor>> state_of(const Module& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  collect_state(m, "", out);
  return out;
}

std::vector<named_tensor> module_state(const Module& module) {
  std::unordered_set<std::string> parameters;
  for (const auto& p : module.named_parameters()) parameters.insert(p.name);
  std::vector<named_tensor> out;
  for (auto& [name, t] : state_of(module)) {
    at::Tensor cpu = t.detach();
    if (!cpu.device().is_cpu()) cpu = cpu.to(at::kCPU);
    out.push_back(
        named_tensor{name, from_tensor(cpu), parameters.count(name) ? tensor_kind::parameter : tensor_kind::buffer});
  }
  return out;
}

std::optional<dtype> model_floating_type(const Module& m) {
  for (const auto& p : m.named_parameters())
    if (at::isFloatingType(p.value.scalar_type())) return from_scalar_type(p.value.scalar_type(), p.name);
  for (const auto& b : m.named_buffers())
    if (at::isFloatingType(b.value.scalar_type())) return from_scalar_type(b.value.scalar_type(), b.name);
  return std::nullopt;
}

std::string error_text(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string s = c10_error ? c10_error->what_without_backtrace() : e.what();
  std::vector<std::string> lines;
  for (size_t start = 0; start <= s.size();) {
    size_t end = s.find('\n', start);
    if (end == std::string::npos) end = s.size();
    lines.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  while (!lines.empty() && lines.back().find_first_not_of(" \t\r") == std::string::npos) lines.pop_back();
  if (s.find("TorchScript interpreter") != std::string::npos) {
    size_t first = lines.size();
    while (first > 0 && !lines[first - 1].empty() && lines[first - 1][0] != ' ' &&
           lines[first - 1].rfind("Traceback", 0) != 0)
      --first;
    std::string out;
    for (size_t i = first; i < lines.size(); ++i) out += (out.empty() ? "" : " ") + lines[i];
    const std::string builtins = "builtins.";
    if (out.compare(0, builtins.size(), builtins) == 0) out = out.substr(builtins.size());
    if (!out.empty()) return out;
  }
  return lines.empty() ? s : lines.front();
}

}  // namespace swavg
