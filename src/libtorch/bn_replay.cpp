/*
 * Recomputes BatchNorm running statistics by replaying data through a TorchScript model (see
 * bn_replay.h for what is computed and how momentum baked into the code is undone).
 */
#include <ATen/Functions.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>

#include "libtorch/batch_feeder.h"
#include "libtorch/batchnorm.h"
#include "libtorch/bn_replay.h"
#include "libtorch/module.h"
#include "libtorch/tensor_bridge.h"
#include "util/error.h"
#include "util/progress.h"

namespace swavg {
namespace {

using torch::jit::Module;

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
        throw input_error(
            fmt::format("{}: BatchNorm '{}' ran {} times in one forward; with momentum {} baked into its code "
                        "swavg cannot separate the calls' statistics",
                        model_name, s.name, most, std::to_string(*s.momentum)));
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

}  // namespace

bn_report plan_batches(const dataset& data, const bn_options& o, const std::string& model_name,
                       const at::Device& device) {
  if (o.batch_size < 1) throw usage_error("--batch-size must be at least 1, got " + std::to_string(o.batch_size));
  if (o.max_batches < 0) throw usage_error("--max-batches must not be negative");
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
    throw input_error(
        fmt::format("{}: {} samples make no whole batch of {} (--drop-last)", data.path, n, o.batch_size));
  r.batches = batches;
  r.samples = std::min(n, batches * o.batch_size);
  return r;
}

bn_report replay_batchnorm(Module& module, const dataset& data, const bn_options& o, const std::string& model_name) {
  const at::Device device = to_device(o.device);
  bn_report r = plan_batches(data, o, model_name, device);
  const int64_t n = data.size(), batches = r.batches;
  r.batches = r.samples = 0;  // until a BatchNorm module is found

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
      throw usage_error(fmt::format("--device {}: {}", device_name(o.device), error_text(e)));
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
        throw mismatch_error(
            fmt::format("{}: the forward failed on batch {} of {} from {}: input {} {} (samples of shape {}): {}{}",
                        model_name, b + 1, batches, data.path, shape_string(x.sizes().vec()), dtype_name(r.input_type),
                        shape_string(r.sample_shape), error_text(e), hint));
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

}  // namespace swavg
