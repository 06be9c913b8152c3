#include "bn/update_bn.h"

#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/ir/constants.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/csrc/jit/serialization/import.h>

#include <chrono>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <spdlog/spdlog.h>
#include <streambuf>
#include <unordered_map>
#include <unordered_set>

#include "core/tensor_bridge.h"
#include "io/load.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/progress.h"

namespace swavg {
namespace {

using torch::jit::Module;

constexpr const char* kModulePrefix = "module.";
constexpr const char* kNAveraged = "n_averaged";
constexpr size_t kMaxListed = 20;
const char* const kStatBuffers[] = {"running_mean", "running_var", "num_batches_tracked"};

std::string list_text(const std::vector<std::string>& items) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < kMaxListed; ++i) s += (i ? ", '" : "'") + items[i] + "'";
  if (items.size() > kMaxListed) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s.empty() ? "none" : s;
}

std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// "__torch__.torch.nn.modules.batchnorm.___torch_mangle_3.BatchNorm2d" -> "torch.nn.modules.batchnorm.BatchNorm2d"
std::string type_name(const Module& m) {
  const auto& name = m.type()->name();
  if (!name) return "?";
  static const std::regex kMangle(R"(___torch_mangle_\d+\.)");
  std::string s = std::regex_replace(name->qualifiedName(), kMangle, "");
  const std::string torch_prefix = "__torch__.";
  if (s.compare(0, torch_prefix.size(), torch_prefix) == 0) s = s.substr(torch_prefix.size());
  return s;
}

std::string class_name(const std::string& qualified) {
  const size_t dot = qualified.rfind('.');
  return dot == std::string::npos ? qualified : qualified.substr(dot + 1);
}

// The text of an exception from a forward: for TorchScript interpreter errors the original
// exception at the end, without the TorchScript traceback.
std::string forward_error_text(const std::exception& e) {
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

bool is_stat_buffer(const std::string& leaf) {
  for (const char* b : kStatBuffers)
    if (leaf == b) return true;
  return false;
}

struct bn_slot {
  std::string name;
  std::string type;
  Module module;
  at::Tensor mean, var, count;     // the module's own buffers (count undefined when it has none)
  std::optional<double> momentum;  // nullopt: None, a cumulative average
  size_t group = 0;                // its statistics in stat_group `group`, from `offset`: mean, then var
  int64_t offset = 0;
  int64_t counter = 0;  // its slot in the counters (its num_batches_tracked during the replay)
};

// The running statistics of all BatchNorm modules of one dtype, as views into one flat buffer, so
// that the bookkeeping of a batch is a handful of operations whatever the number of modules.
struct stat_group {
  at::ScalarType type = at::kFloat;
  int64_t size = 0;
  std::vector<int64_t> owner;  // counter slot of each element
  at::Tensor flat;             // the modules' running_mean and running_var during the replay
  at::Tensor owner_index;      // owner, on the device
  at::Tensor weights;          // int64: each element's module's calls in this batch
  at::Tensor weighted;         // flat x weights
  at::Tensor sum;              // float64: sums of momentum x batch statistics x calls
};

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
        throw input_error(model_path + ": BatchNorm '" + name +
                          "' was traced in eval mode: training=False is baked into its code, so replaying data cannot "
                          "update its statistics; trace the model after model.train(), or script it");
      if (auto v = torch::jit::toIValue(node->input(6)))
        if (auto momentum = from_value(*v)) return *momentum;
    }
  }
  throw input_error(model_path + ": cannot tell the momentum of BatchNorm module '" + name +
                    "' (no 'momentum' constant or attribute, no aten::batch_norm call with a constant momentum)");
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
      throw input_error(model_path + ": BatchNorm '" + s.name + "' has momentum 0: its statistics never change");
    if (!s.momentum && !s.count.defined())
      throw input_error(model_path + ": BatchNorm '" + s.name +
                        "' has momentum None but no num_batches_tracked buffer");
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

void collect_state(const Module& m, const std::string& prefix, std::vector<std::pair<std::string, at::Tensor>>& out) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) out.emplace_back(join(prefix, p.name), p.value);
  for (const auto& b : m.named_buffers(/*recurse=*/false)) out.emplace_back(join(prefix, b.name), b.value);
  for (const auto& c : m.named_children()) collect_state(c.value, join(prefix, c.name), out);
}

std::vector<std::pair<std::string, at::Tensor>> state_of(const Module& m) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  collect_state(m, "", out);
  return out;
}

at::Device parse_device(const std::string& d) {
  try {
    at::Device dev(d);
    if (!dev.is_cpu() && !dev.is_cuda()) throw usage_error("--device: expected cpu or cuda[:N], got '" + d + "'");
    if (dev.is_cuda() && !at::hasCUDA())
      throw usage_error("--device " + d + ": this swavg was built without CUDA or no GPU is visible");
    return dev;
  } catch (const c10::Error&) {
    throw usage_error("--device: expected cpu or cuda[:N], got '" + d + "'");
  }
}

std::optional<dtype> model_floating_type(const Module& m) {
  for (const auto& p : m.named_parameters())
    if (at::isFloatingType(p.value.scalar_type())) return from_scalar_type(p.value.scalar_type(), p.name);
  for (const auto& b : m.named_buffers())
    if (at::isFloatingType(b.value.scalar_type())) return from_scalar_type(b.value.scalar_type(), b.name);
  return std::nullopt;
}

// Batches are narrowed from one tensor over the whole mapped array. Bytes not aligned to the
// element size (possible in files not written by numpy or PyTorch) are copied batch by batch.
class batch_source {
 public:
  explicit batch_source(const tensor_view& v) : view_(v) {
    options_ = at::TensorOptions().dtype(to_scalar_type(v.type)).device(at::kCPU);
    aligned_ = reinterpret_cast<uintptr_t>(v.data()) % itemsize(v.type) == 0;
    if (aligned_) {
      auto owner = v.owner;
      all_ = at::from_blob(
          const_cast<uint8_t*>(v.data()), v.shape, v.strides, [owner](void*) {}, options_);
    }
  }

  at::Tensor get(int64_t begin, int64_t count) const {
    if (aligned_) return all_.narrow(0, begin, count);
    std::vector<int64_t> shape = view_.shape;
    shape[0] = count;
    int64_t span = 1;
    for (size_t i = 0; i < shape.size(); ++i) span += (shape[i] - 1) * view_.strides[i];
    auto copy = at::empty({span}, options_);
    const size_t item = itemsize(view_.type);
    std::memcpy(copy.data_ptr(), view_.data() + static_cast<uint64_t>(begin * view_.strides[0]) * item,
                static_cast<size_t>(span) * item);
    return copy.as_strided(shape, view_.strides, 0);
  }

 private:
  const tensor_view& view_;
  at::TensorOptions options_;
  bool aligned_ = false;
  at::Tensor all_;
};

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

std::shared_ptr<Module> load_model(const std::string& path) {
  const file_format format = detect_format(path);
  if (format != file_format::torchscript)
    throw input_error(path + ": is a " + (format == file_format::torch ? "torch.save checkpoint" : "safetensors file") +
                      ", not a TorchScript module: --model needs a file written by torch.jit.save (of torch.jit.script "
                      "or torch.jit.trace)");
  auto module = std::make_shared<Module>();
  try {
    *module = torch::jit::load(path, c10::Device(c10::kCPU));
  } catch (const c10::Error& e) {
    std::string what = e.what_without_backtrace();
    throw input_error(path + ": cannot load TorchScript module: " + what.substr(0, what.find('\n')));
  }
  return module;
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

bool from_averaged_layout(std::vector<named_tensor>& tensors, std::optional<named_tensor>& n_averaged) {
  const std::string prefix = kModulePrefix;
  bool has_count = false, all_prefixed = true;
  for (const auto& t : tensors) {
    if (t.name == kNAveraged)
      has_count = true;
    else if (t.name.compare(0, prefix.size(), prefix) != 0)
      all_prefixed = false;
  }
  if (!has_count || !all_prefixed || tensors.size() < 2) return false;
  std::vector<named_tensor> renamed;
  for (auto& t : tensors) {
    if (t.name == kNAveraged) {
      n_averaged = std::move(t);
      continue;
    }
    t.name = t.name.substr(prefix.size());
    renamed.push_back(std::move(t));
  }
  tensors = std::move(renamed);
  return true;
}

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
    throw mismatch_error(source + ": its tensor names do not match the model's: " + std::to_string(missing.size()) +
                         " missing (" + list_text(missing) + "), " + std::to_string(unexpected.size()) +
                         " unexpected (" + list_text(unexpected) + ")");
  c10::NoGradGuard no_grad;
  for (const auto& [name, t] : targets) {
    auto it = given.find(name);
    if (it == given.end()) continue;
    const tensor_view& v = it->second->view;
    if (v.shape != t.sizes().vec())
      throw mismatch_error(source + ": tensor '" + name + "' has shape " + shape_string(v.shape) +
                           " but the model expects " + shape_string(t.sizes().vec()));
    try {
      at::Tensor target = t;
      target.copy_(to_tensor(v));
    } catch (const c10::Error& e) {
      throw mismatch_error(source + ": tensor '" + name + "' (" + dtype_name(v.type) +
                           ") cannot be loaded into the model's " + std::string(c10::toString(t.scalar_type())) +
                           " tensor: " + forward_error_text(e));
    }
  }
}

namespace {

// For the replay, swaps every BatchNorm module's statistics for views into flat buffers (one per
// dtype) and its num_batches_tracked for an element of one counter vector. On exit it puts the
// module's own tensors back (holding the results once finish() ran, untouched after an error) and
// the training flag as it was.
class replay_state {
 public:
  replay_state(Module& module, std::vector<bn_slot>& slots, const at::Device& device)
      : module_(module), slots_(slots), was_training_(module.is_training()) {
    const auto on = [&](at::ScalarType t) { return at::TensorOptions().dtype(t).device(device); };
    int64_t counters = 0;
    for (auto& s : slots_) {
      size_t g = 0;
      while (g < groups_.size() && groups_[g].type != s.mean.scalar_type()) ++g;
      if (g == groups_.size()) {
        groups_.emplace_back();
        groups_.back().type = s.mean.scalar_type();
      }
      s.group = g;
      s.offset = groups_[g].size;
      groups_[g].size += 2 * s.mean.numel();
      if (s.count.defined())
        s.counter = counters++;
      else
        uncounted_ = true;
    }
    ones_slot_ = counters;  // held at 1 in every batch: the calls of modules without a counter
    for (auto& s : slots_)
      if (!s.count.defined()) s.counter = ones_slot_;
    counts_ = at::zeros({counters + 1}, on(at::kLong));
    calls_ = at::zeros({counters + 1}, on(at::kLong));
    max_calls_ = at::zeros({counters + 1}, on(at::kLong));
    for (auto& g : groups_) {
      g.owner.resize(static_cast<size_t>(g.size));
      g.flat = at::zeros({g.size}, on(g.type));
      g.weights = at::empty({g.size}, on(at::kLong));
      g.weighted = at::empty({g.size}, on(g.type));
      g.sum = at::zeros({g.size}, on(at::kDouble));
    }
    for (auto& s : slots_) {
      stat_group& g = groups_[s.group];
      const int64_t c = s.mean.numel();
      std::fill(g.owner.begin() + s.offset, g.owner.begin() + s.offset + 2 * c, s.counter);
      s.module.register_buffer("running_mean", g.flat.narrow(0, s.offset, c).view(s.mean.sizes()));
      s.module.register_buffer("running_var", g.flat.narrow(0, s.offset + c, c).view(s.var.sizes()));
      if (s.count.defined()) s.module.register_buffer("num_batches_tracked", counts_.select(0, s.counter));
    }
    for (auto& g : groups_) g.owner_index = at::tensor(g.owner, at::kLong).to(device);
    module_.train(true);
  }

  ~replay_state() { restore(); }

  void before_batch() {
    for (auto& g : groups_) g.flat.zero_();
    counts_.zero_();
    if (uncounted_) counts_.narrow(0, ones_slot_, 1).fill_(1);
  }

  void after_batch() {
    for (auto& g : groups_) {
      at::index_select_out(g.weights, counts_, 0, g.owner_index);
      at::mul_out(g.weighted, g.flat, g.weights);
      g.sum.add_(g.weighted);
    }
    calls_.add_(counts_);
    at::maximum_out(max_calls_, max_calls_, counts_);
  }

  // Writes the statistics into the modules' own tensors and puts those back; returns each slot's
  // batches.
  std::vector<int64_t> finish(const std::string& model_name) {
    const at::Tensor calls = calls_.cpu(), max_calls = max_calls_.cpu();
    std::vector<int64_t> out;
    for (auto& s : slots_) {
      const int64_t n = calls[s.counter].item<int64_t>();
      const int64_t most = max_calls[s.counter].item<int64_t>();
      if (s.momentum && most > 1)
        throw input_error(model_name + ": BatchNorm '" + s.name + "' ran " + std::to_string(most) +
                          " times in one forward; with momentum " + std::to_string(*s.momentum) +
                          " baked into its code swavg cannot separate the calls' statistics");
      const stat_group& g = groups_[s.group];
      const int64_t c = s.mean.numel();
      if (n == 0) {
        s.mean.fill_(0);
        s.var.fill_(1);
      } else {
        const double divisor = (s.momentum ? *s.momentum : 1.0) * static_cast<double>(n);
        s.mean.copy_(g.sum.narrow(0, s.offset, c).div(divisor).view(s.mean.sizes()));
        s.var.copy_(g.sum.narrow(0, s.offset + c, c).div(divisor).view(s.var.sizes()));
      }
      if (s.count.defined()) s.count.fill_(n);
      out.push_back(n);
    }
    restore();
    return out;
  }

 private:
  void restore() {
    if (restored_) return;
    restored_ = true;
    for (auto& s : slots_) {
      s.module.register_buffer("running_mean", s.mean);
      s.module.register_buffer("running_var", s.var);
      if (s.count.defined()) s.module.register_buffer("num_batches_tracked", s.count);
    }
    module_.train(was_training_);
  }

  Module& module_;
  std::vector<bn_slot>& slots_;
  bool was_training_;
  bool restored_ = false;
  std::vector<stat_group> groups_;
  at::Tensor counts_, calls_, max_calls_;
  int64_t ones_slot_ = 0;
  bool uncounted_ = false;
};

// Hands out batches as the model takes them: on the CPU in the data's own dtype straight from the
// mapping, else converted (and moved to the device) into one reused buffer.
class batch_feeder {
 public:
  batch_feeder(const dataset& data, dtype input_type, const at::Device& device, int64_t batch_size)
      : source_(data.samples) {
    direct_ = device.is_cpu() && input_type == data.samples.type;
    if (direct_) return;
    std::vector<int64_t> shape = data.samples.shape;
    shape[0] = std::min(batch_size, data.size());
    staging_ = at::empty(shape, at::TensorOptions().dtype(to_scalar_type(input_type)).device(device));
  }

  at::Tensor get(int64_t begin, int64_t count) {
    at::Tensor x = source_.get(begin, count);
    return direct_ ? x : staging_.narrow(0, 0, count).copy_(x);
  }

 private:
  batch_source source_;
  bool direct_ = false;
  at::Tensor staging_;
};

}  // namespace

bn_report update_bn(Module& module, const dataset& data, const bn_options& o, const std::string& model_name) {
  if (o.batch_size < 1) throw usage_error("--batch-size must be at least 1, got " + std::to_string(o.batch_size));
  if (o.max_batches < 0) throw usage_error("--max-batches must not be negative");
  const at::Device device = parse_device(o.device);

  bn_report r;
  r.model = model_name;
  r.data = data.path;
  r.data_format = data.format;
  r.data_key = data.key;
  r.sample_shape = data.sample_shape();
  r.data_type = data.samples.type;
  r.batch_size = o.batch_size;
  r.device = device.str();

  const int64_t n = data.size();
  int64_t batches = n / o.batch_size + (!o.drop_last && n % o.batch_size != 0);
  if (o.max_batches > 0) batches = std::min(batches, o.max_batches);
  if (batches == 0)
    throw input_error(data.path + ": " + std::to_string(n) + " samples make no whole batch of " +
                      std::to_string(o.batch_size) + " (--drop-last)");

  const std::optional<dtype> floating = model_floating_type(module);
  if (o.input_type)
    r.input_type = *o.input_type;
  else if (is_floating(data.samples.type) && floating)
    r.input_type = *floating;
  else
    r.input_type = data.samples.type;

  if (find_batchnorms(module, model_name).empty()) {
    spdlog::info("{}: no BatchNorm module, nothing to update", model_name);
    return r;
  }

  c10::NoGradGuard no_grad;
  if (!device.is_cpu()) {
    try {
      module.to(device);
    } catch (const c10::Error& e) {
      throw usage_error("--device " + o.device + ": " + forward_error_text(e));
    }
  }
  std::vector<bn_slot> slots = find_batchnorms(module, model_name);
  batch_feeder feeder(data, r.input_type, device, o.batch_size);
  const uint64_t sample_bytes = data.samples.nbytes() / static_cast<uint64_t>(n);
  r.batches = batches;
  r.samples = std::min(n, batches * o.batch_size);

  std::vector<int64_t> calls;
  const auto start = std::chrono::steady_clock::now();
  {
    // The graph executor's profiling and optimizing runs cost more than a replay of a few hundred
    // batches gains from them (resnet18 on CPU: 0.15 s more for its first two batches, the same
    // afterwards); unoptimized, the forward runs the same ATen kernels as eager PyTorch.
    torch::jit::GraphOptimizerEnabledGuard unoptimized(false);
    replay_state state(module, slots, device);
    progress bar(o.progress ? sample_bytes * static_cast<uint64_t>(r.samples) : 0, "update-bn");
    for (int64_t b = 0; b < batches; ++b) {
      const int64_t begin = b * o.batch_size;
      const int64_t count = std::min(o.batch_size, n - begin);
      state.before_batch();
      const at::Tensor x = feeder.get(begin, count);
      try {
        module.forward({x});
      } catch (const std::exception& e) {
        std::string hint;
        if (count == 1 && b == batches - 1 && b > 0) hint = " (the last batch holds one sample: try --drop-last)";
        throw mismatch_error(model_name + ": the forward failed on batch " + std::to_string(b + 1) + " of " +
                             std::to_string(batches) + " from " + data.path + ": input " +
                             shape_string(x.sizes().vec()) + " " + dtype_name(r.input_type) + " (samples of shape " +
                             shape_string(r.sample_shape) + "): " + forward_error_text(e) + hint);
      }
      state.after_batch();
      bar.advance(sample_bytes * static_cast<uint64_t>(count));
    }
    calls = state.finish(model_name);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  for (size_t i = 0; i < slots.size(); ++i) {
    const bn_slot& s = slots[i];
    if (calls[i] == 0)
      spdlog::warn(
          "BatchNorm '{}' was not reached by the forward: its statistics are reset (mean 0, var 1), as "
          "update_bn leaves them",
          s.name);
    r.modules.push_back(bn_module_report{s.name, s.type, s.mean.numel(), s.momentum, calls[i]});
  }
  if (!device.is_cpu()) module.to(at::kCPU);
  return r;
}

update_bn_result update_batchnorm(const std::string& model_path, const std::vector<named_tensor>& weights,
                                  const std::string& weights_source, const dataset& data, const bn_options& options) {
  update_bn_result result;
  result.module = load_model(model_path);
  std::vector<named_tensor> w = weights;
  std::optional<named_tensor> n_averaged;
  const bool averaged = result.averaged_layout = from_averaged_layout(w, n_averaged);
  if (averaged) spdlog::info("{}: averaged-model layout (module.* and n_averaged)", weights_source);
  if (!w.empty()) load_weights(*result.module, w, weights_source);
  result.report = update_bn(*result.module, data, options, model_path);
  result.tensors = module_state(*result.module);
  if (averaged) {
    for (auto& t : result.tensors) t.name = kModulePrefix + t.name;
    result.tensors.push_back(std::move(*n_averaged));
  }
  return result;
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
      throw io_error(path + ": cannot write the TorchScript module: " + forward_error_text(e));
    }
    stream.flush();
  }
  const uint64_t bytes = out.tell();
  out.commit();
  return bytes;
}

std::string bn_report_json(const bn_report& r) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["data"] = {{"file", r.data},
               {"format", r.data_format},
               {"key", r.data_key},
               {"sample_shape", r.sample_shape},
               {"dtype", dtype_name(r.data_type)}};
  j["input_dtype"] = dtype_name(r.input_type);
  j["device"] = r.device;
  j["batch_size"] = r.batch_size;
  j["batches"] = r.batches;
  j["samples"] = r.samples;
  auto modules = nlohmann::ordered_json::array();
  for (const auto& m : r.modules) {
    nlohmann::ordered_json e = {{"name", m.name}, {"type", m.type}, {"features", m.features}};
    e["momentum"] = m.momentum ? nlohmann::ordered_json(*m.momentum) : nlohmann::ordered_json(nullptr);
    e["batches"] = m.batches;
    modules.push_back(e);
  }
  j["modules"] = modules;
  j["seconds"] = r.seconds;
  return j.dump();
}

}  // namespace swavg
