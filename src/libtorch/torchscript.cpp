/*
 * TorchScript through LibTorch, only where a model must run (update-bn, --save-module): loading an
 * archive, reading the state of the loaded module, saving one. Reading TorchScript checkpoints
 * (inspect, convert, average, ema, --model) is formats/torchscript.cpp's, which runs nothing.
 */
#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/import.h>

#include <fmt/format.h>

#include <ostream>
#include <streambuf>
#include <unordered_set>

#include "formats/load.h"
#include "libtorch/module.h"
#include "libtorch/tensor_bridge.h"
#include "libtorch/update_bn.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace swavg {
namespace {

using torch::jit::Module;

void collect_state(const Module& m, const std::string& prefix, std::vector<std::pair<std::string, at::Tensor>>& out) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) out.emplace_back(join(prefix, p.name), p.value);
  for (const auto& b : m.named_buffers(/*recurse=*/false)) out.emplace_back(join(prefix, b.name), b.value);
  for (const auto& c : m.named_children()) collect_state(c.value, join(prefix, c.name), out);
}

class atomic_streambuf : public std::streambuf {
 public:
  explicit atomic_streambuf(atomic_file& out) : out_(out) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    out_.write(s, static_cast<uint64_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      const char ch = traits_type::to_char_type(c);
      out_.write(&ch, 1);
    }
    return traits_type::not_eof(c);
  }

 private:
  atomic_file& out_;
};

}  // namespace

std::shared_ptr<Module> load_module(const std::string& path) {
  auto module = std::make_shared<Module>();
  try {
    *module = torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    throw input_error(fmt::format("{}: cannot load TorchScript archive: {}", path, what.substr(0, what.find('\n'))));
  }
  return module;
}

std::shared_ptr<Module> load_model(const std::string& path) {
  const file_format format = detect_format(path);
  if (format != file_format::torchscript)
    throw input_error(fmt::format("{}: is a {}, not a TorchScript module: --model needs a file written by torch.jit.save "
                                  "(of torch.jit.script or torch.jit.trace)",
                                  path, format == file_format::torch ? "torch.save checkpoint" : "safetensors file"));
  return load_module(path);
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

uint64_t save_module(const Module& module, const std::string& path) {
  atomic_file out(path);
  {
    atomic_streambuf buf(out);
    std::ostream stream(&buf);
    stream.exceptions(std::ios::badbit);
    try {
      module.save(stream);
    } catch (const c10::Error& e) {
      throw io_error(fmt::format("{}: cannot write the TorchScript module: {}", path, error_text(e)));
    }
    stream.flush();
  }
  const uint64_t bytes = out.tell();
  out.commit();
  return bytes;
}

}  // namespace swavg
