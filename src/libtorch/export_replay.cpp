// update-bn for a torch.export program (see export_replay.h).
#include "libtorch/export_replay.h"

#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "fold/layout.h"
#include "formats/export/export_batchnorm.h"
#include "formats/export/pt2_archive.h"
#include "libtorch/batch_feeder.h"
#include "libtorch/export_runner.h"
#include "libtorch/module.h"
#include "libtorch/tensor_bridge.h"
#include "util/error.h"
#include "util/listing.h"
#include "util/mapped_file.h"
#include "util/progress.h"

namespace swavg {
namespace {

// What update-bn runs: core ATen with one user input and no mutation of it.
const export_input_spec& check_program(const pt2_archive& a) {
  const export_program& p = a.program;
  if (p.verifier == "TRAINING")
    throw input_error(
        fmt::format("{}: a program in torch.export's training IR, where BatchNorm updates its buffers in place: save "
                    "ep.run_decompositions() (core ATen) instead: torch.export.save(ep.run_decompositions(), PATH)",
                    a.path));
  if (p.verifier != "ATEN")
    throw input_error(
        fmt::format("{}: a program verified as '{}'; swavg runs core ATen programs (ATEN), saved "
                    "from ep.run_decompositions()",
                    a.path, p.verifier));
  const export_input_spec* user = nullptr;
  size_t users = 0;
  for (const export_input_spec& s : p.inputs)
    if (s.role == export_input_role::user_input) user = &s, ++users;
  if (users != 1)
    throw input_error(fmt::format("{}: the program takes {} tensors; update-bn feeds one, the batch", a.path, users));
  for (const export_output_spec& s : p.outputs)
    if (s.role == export_output_role::user_input_mutation)
      throw input_error(fmt::format("{}: the program writes to its input; update-bn feeds it read-only data", a.path));
  return *user;
}

// The batches against the program's declared input: rank, fixed sizes, the symbols' ranges.
void check_input(const pt2_archive& a, const export_input_spec& user, const dataset& data, const bn_report& r,
                 int64_t last_batch) {
  const export_tensor_type& t = a.program.input_types.at(user.value);
  const std::vector<int64_t> sample = data.sample_shape();
  const auto takes = [&]() { return fmt::format("the program takes {} {}", export_type_text(t), dtype_name(t.type)); };
  if (t.sizes.size() != sample.size() + 1)
    throw mismatch_error(fmt::format("{}: samples of shape {}, but {} ({} dimensions with the batch's)", data.path,
                                     shape_string(sample), takes(), t.sizes.size()));
  std::map<std::string, int64_t> bound;
  const auto check = [&](const export_dim& d, int64_t size, const std::string& what) {
    if (d.symbol.empty()) {
      if (d.size == size) return;
      throw mismatch_error(fmt::format("{}: {} is {}, but {}{}", a.path, what, size, takes(),
                                       &d == &t.sizes[0] ? " (exported without a dynamic batch dimension: export with "
                                                           "dynamic_shapes=({0: torch.export.Dim(\"batch\")},), or "
                                                           "give a --batch-size it takes and --drop-last)"
                                                         : ""));
    }
    const export_range& range = a.program.ranges.at(d.symbol);
    if (size < range.min || (range.max && size > *range.max))
      throw mismatch_error(fmt::format("{}: {} is {}, outside {}'s range {}..{} in the program", a.path, what, size,
                                       d.symbol, range.min, range.max ? std::to_string(*range.max) : "inf"));
    if (&d != &t.sizes[0]) {
      const auto [it, added] = bound.emplace(d.symbol, size);
      if (!added && it->second != size)
        throw mismatch_error(fmt::format("{}: samples of shape {}, but {}: {} must be one size", data.path,
                                         shape_string(sample), takes(), d.symbol));
    }
  };
  for (size_t i = 1; i < t.sizes.size(); ++i)
    check(t.sizes[i], sample[i - 1], fmt::format("dimension {} of the samples", i));
  check(t.sizes[0], std::min(r.batch_size, data.size()), "the batch (--batch-size)");
  check(t.sizes[0], last_batch, "the last batch");
}

std::string stat(const std::string& module, const char* leaf) { return module + "." + leaf; }

// A checkpoint's tensors bound to the program's weights by name, as load_state_dict(strict=True)
// binds them, except that BatchNorm statistics may be missing.
void bind_checkpoint(const pt2_archive& a, const std::vector<export_batchnorm>& bns,
                     const std::vector<named_tensor>& weights, const std::string& source,
                     std::unordered_map<std::string, at::Tensor>& state) {
  std::unordered_set<std::string> stats;
  for (const export_batchnorm& bn : bns)
    for (const char* leaf : {"running_mean", "running_var", "num_batches_tracked"}) stats.insert(stat(bn.module, leaf));
  std::unordered_map<std::string, const named_tensor*> given;
  for (const named_tensor& w : weights) given.emplace(w.name, &w);
  std::vector<std::string> missing, unexpected;
  std::unordered_set<std::string> expected;
  for (const named_tensor& w : a.weights) {
    expected.insert(w.name);
    if (!given.count(w.name) && !stats.count(w.name)) missing.push_back(w.name);
  }
  for (const named_tensor& w : weights)
    if (!expected.count(w.name)) unexpected.push_back(w.name);
  if (!missing.empty() || !unexpected.empty())
    throw mismatch_error(fmt::format(
        "{}: its tensor names do not match the program's (its signature's): {} missing ({}), {} unexpected ({})",
        source, missing.size(), quoted_list(missing), unexpected.size(), quoted_list(unexpected)));
  for (const named_tensor& w : a.weights) {
    const auto it = given.find(w.name);
    if (it == given.end()) continue;
    const tensor_view& v = it->second->view;
    if (v.shape != w.view.shape)
      throw mismatch_error(fmt::format("{}: tensor '{}' has shape {} but the program expects {}", source, w.name,
                                       shape_string(v.shape), shape_string(w.view.shape)));
    at::Tensor t = to_tensor(v);
    if (v.type != w.view.type) {
      if (is_complex(v.type) && !is_complex(w.view.type))
        throw mismatch_error(fmt::format("{}: tensor '{}' is {}, the program's is {}", source, w.name,
                                         dtype_name(v.type), dtype_name(w.view.type)));
      t = t.to(to_scalar_type(w.view.type));
    }
    state[w.name] = t;
  }
}

class exported_replay {
 public:
  exported_replay(pt2_archive archive, const bn_options& o) : a_(std::move(archive)), o_(o) {}

  update_bn_result run(const std::vector<named_tensor>& weights, const std::string& source, const dataset& data);

 private:
  void bind(const std::vector<named_tensor>& weights, const std::string& source);
  void replay(const export_input_spec& user, const dataset& data, bn_report& r);
  std::vector<named_tensor> result_tensors(const std::vector<named_tensor>& order) const;

  pt2_archive a_;
  const bn_options& o_;
  at::Device device_ = at::kCPU;
  std::vector<export_batchnorm> bns_;
  std::unordered_map<std::string, at::Tensor> state_;
  std::vector<at::Tensor> inputs_;
  std::unordered_map<std::string, size_t> input_of_;  // target -> its place in inputs_
};

void exported_replay::bind(const std::vector<named_tensor>& weights, const std::string& source) {
  for (const named_tensor& w : a_.weights) state_[w.name] = to_tensor(w.view);
  for (const named_tensor& c : a_.constants) state_[c.name] = to_tensor(c.view);
  if (!weights.empty()) bind_checkpoint(a_, bns_, weights, source, state_);
  for (const export_batchnorm& bn : bns_) {
    at::Tensor& mean = state_.at(stat(bn.module, "running_mean"));
    mean = at::zeros_like(mean);
    at::Tensor& var = state_.at(stat(bn.module, "running_var"));
    var = at::ones_like(var);
    if (!bn.num_batches_tracked.empty()) {
      at::Tensor& count = state_.at(bn.num_batches_tracked);
      count = at::zeros_like(count);
    }
  }
  inputs_.resize(a_.program.inputs.size());
  for (size_t i = 0; i < a_.program.inputs.size(); ++i) {
    const export_input_spec& s = a_.program.inputs[i];
    if (s.role == export_input_role::user_input) continue;
    input_of_[s.target] = i;
    inputs_[i] = device_.is_cpu() ? state_.at(s.target) : state_.at(s.target).to(device_);
  }
}

void exported_replay::replay(const export_input_spec& user, const dataset& data, bn_report& r) {
  const size_t user_index = static_cast<size_t>(&user - a_.program.inputs.data());
  const int64_t n = data.size();
  const int64_t last_batch = std::min(o_.batch_size, n - (r.batches - 1) * o_.batch_size);
  check_input(a_, user, data, r, last_batch);
  export_runner runner(a_.program, a_.path, device_);
  batch_feeder feeder(data, r.input_type, device_, o_.batch_size);
  const uint64_t sample_bytes = data.samples.nbytes() / static_cast<uint64_t>(n);
  progress bar(o_.progress ? sample_bytes * static_cast<uint64_t>(r.samples) : 0, "update-bn");
  for (int64_t b = 0; b < r.batches; ++b) {
    for (const export_batchnorm& bn : bns_) {
      const int64_t calls = static_cast<int64_t>(bn.nodes.size());
      for (int64_t k = 0; k < calls; ++k)
        runner.set_real(bn.nodes[static_cast<size_t>(k)], "momentum", 1.0 / static_cast<double>(b * calls + k + 1));
    }
    const int64_t begin = b * o_.batch_size, count = std::min(o_.batch_size, n - begin);
    inputs_[user_index] = feeder.get(begin, count);
    std::vector<c10::IValue> out;
    try {
      out = runner.run(inputs_);
    } catch (const error&) {
      throw;
    } catch (const std::exception& e) {
      throw mismatch_error(fmt::format("{}: the program failed on batch {} of {} from {}: input {} {}: {}", a_.path,
                                       b + 1, r.batches, data.path, shape_string(inputs_[user_index].sizes().vec()),
                                       dtype_name(r.input_type), error_text(e)));
    }
    for (size_t i = 0; i < out.size(); ++i)
      if (a_.program.outputs[i].role == export_output_role::buffer_mutation)
        inputs_[input_of_.at(a_.program.outputs[i].target)] = out[i].toTensor();
    bar.advance(sample_bytes * static_cast<uint64_t>(count));
  }
}

std::vector<named_tensor> exported_replay::result_tensors(const std::vector<named_tensor>& order) const {
  std::vector<named_tensor> out;
  for (const named_tensor& w : order) {
    at::Tensor t = inputs_[input_of_.at(w.name)].detach();
    if (!t.device().is_cpu()) t = t.to(at::kCPU);
    const bool parameter = a_.program.inputs[input_of_.at(w.name)].role == export_input_role::parameter;
    out.push_back(named_tensor{w.name, from_tensor(t), parameter ? tensor_kind::parameter : tensor_kind::buffer});
  }
  return out;
}

update_bn_result exported_replay::run(const std::vector<named_tensor>& weights, const std::string& source,
                                      const dataset& data) {
  device_ = to_device(o_.device);
  update_bn_result result;
  result.report = plan_batches(data, o_, a_.path, device_);
  bn_report& r = result.report;
  const export_input_spec& user = check_program(a_);
  const export_tensor_type& input = a_.program.input_types.at(user.value);
  if (o_.input_type && *o_.input_type != input.type)
    throw usage_error(fmt::format("--input-dtype {}: the program {} takes {}", dtype_name(*o_.input_type), a_.path,
                                  dtype_name(input.type)));
  r.input_type = input.type;
  bns_ = find_export_batchnorms(a_.program, a_.path);
  c10::NoGradGuard no_grad;
  bind(weights, source);
  const auto start = std::chrono::steady_clock::now();
  if (std::none_of(bns_.begin(), bns_.end(), [](const export_batchnorm& bn) { return bn.reached; })) {
    spdlog::info("{}: no BatchNorm module, nothing to update", a_.path);
    r.batches = r.samples = 0;
  } else {
    replay(user, data, r);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const export_batchnorm& bn : bns_) {
    if (!bn.reached)
      spdlog::warn(
          "BatchNorm '{}' is not called by the program: its statistics are reset (mean 0, var 1), as "
          "update_bn leaves them",
          bn.module);
    const int64_t batches = bn.reached ? r.batches * static_cast<int64_t>(bn.nodes.size()) : 0;
    r.modules.push_back(
        bn_module_report{bn.module, "aten._native_batch_norm_legit_functional", bn.features, bn.momentum, batches});
  }
  // The checkpoint's names in its order, then what it lacks (BatchNorm statistics); else the program's.
  std::vector<named_tensor> order = weights;
  std::unordered_set<std::string> named;
  for (const named_tensor& w : weights) named.insert(w.name);
  for (const named_tensor& w : a_.weights)
    if (!named.count(w.name)) order.push_back(w);
  result.tensors = result_tensors(order);
  return result;
}

}  // namespace

update_bn_result update_batchnorm_exported(const std::string& program_path, const std::vector<named_tensor>& weights,
                                           const std::string& weights_source, const dataset& data,
                                           const bn_options& options) {
  std::vector<named_tensor> w = weights;
  std::optional<named_tensor> n_averaged;
  const bool averaged = from_averaged_layout(w, n_averaged);
  if (averaged) spdlog::info("{}: averaged-model layout (module.* and n_averaged)", weights_source);
  exported_replay replay(read_pt2_archive(mapped_file::open(program_path), program_path), options);
  update_bn_result result = replay.run(w, weights_source, data);
  result.averaged_layout = averaged;
  if (averaged) to_averaged_layout(result.tensors, std::move(*n_averaged));
  return result;
}

}  // namespace swavg
