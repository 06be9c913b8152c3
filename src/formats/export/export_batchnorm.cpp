// The BatchNorm modules of a torch.export program (see export_batchnorm.h).
#include "formats/export/export_batchnorm.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "util/error.h"
#include "util/printable.h"
#include "util/text.h"

namespace swavg {
namespace {

constexpr const char* kEvalTarget = "torch.ops.aten._native_batch_norm_legit_no_training.default";
const std::string kMean = ".running_mean", kVar = ".running_var", kCount = ".num_batches_tracked";

const export_arg* argument(const export_node& n, const char* name) {
  for (const export_input& in : n.inputs)
    if (in.name == name) return &in.arg;
  return nullptr;
}

class batchnorm_finder {
 public:
  batchnorm_finder(const export_program& p, const std::string& path) : p_(p), path_(path) {
    for (const export_input_spec& s : p.inputs)
      if (s.role == export_input_role::buffer) buffers_[s.value] = s.target, buffer_names_.insert(s.target);
    for (const export_output_spec& s : p.outputs)
      if (s.role == export_output_role::buffer_mutation) mutated_to_[s.target] = s.value;
  }

  std::vector<export_batchnorm> find() {
    for (size_t i = 0; i < p_.nodes.size(); ++i) {
      const export_node& n = p_.nodes[i];
      if (n.target == kEvalTarget)
        fail(n,
             "BatchNorm exported in eval mode has no statistics to update: export the model in train mode "
             "(model.train()), then save ep.run_decompositions()");
      if (n.target == kExportBatchNormTarget) add_call(i, n);
    }
    check_last_calls();
    add_unreached();
    return std::move(found_);
  }

 private:
  [[noreturn]] void fail(const export_node& n, const std::string& message) const {
    throw input_error(fmt::format("{}: BatchNorm node '{}': {}", path_, printable(n.name), message));
  }

  // The buffer a statistic comes from: a buffer input, or an earlier call's new statistic.
  std::string buffer_of(const export_node& n, const char* name) const {
    const export_arg* a = argument(n, name);
    if (!a || a->type != export_arg_type::tensor) fail(n, fmt::format("its {} is not a tensor", name));
    const int32_t v = a->refs[0];
    if (const auto b = buffers_.find(v); b != buffers_.end()) return b->second;
    if (const auto c = chained_.find(v); c != chained_.end()) return c->second;
    fail(n, fmt::format("its {} '{}' is neither a buffer nor an earlier BatchNorm call's statistic", name,
                        printable(p_.values[static_cast<size_t>(v)].name)));
  }

  void add_call(size_t index, const export_node& n) {
    const std::string mean = buffer_of(n, "running_mean"), var = buffer_of(n, "running_var");
    if (!ends_with(mean, kMean) || var != mean.substr(0, mean.size() - kMean.size()) + kVar)
      fail(n, fmt::format("its statistics '{}' and '{}' are not one module's running_mean and running_var",
                          printable(mean), printable(var)));
    const export_arg* training = argument(n, "training");
    if (!training || training->type != export_arg_type::boolean || training->ints[0] == 0)
      fail(n, "not called in training mode: export the model in train mode (model.train())");
    const export_arg* momentum = argument(n, "momentum");
    if (!momentum || momentum->type != export_arg_type::real)
      fail(n,
           "its momentum is not a float (a module with momentum=None cannot be exported: leave the momentum as "
           "it is, update-bn computes update_bn's cumulative average whatever it is)");
    if (n.outputs.size() != 5 || n.outputs[3].values.size() != 1 || n.outputs[4].values.size() != 1)
      fail(n, "expected five outputs (out, save_mean, save_rstd, running_mean, running_var)");
    chained_[n.outputs[3].values[0]] = mean;
    chained_[n.outputs[4].values[0]] = var;
    const std::string module = mean.substr(0, mean.size() - kMean.size());
    last_call_[module] = index;
    auto [it, added] = index_.emplace(module, found_.size());
    if (added) {
      export_batchnorm bn;
      bn.module = module;
      bn.momentum = momentum->reals[0];
      bn.num_batches_tracked = buffer_names_.count(module + kCount) ? module + kCount : "";
      for (const export_input_spec& s : p_.inputs)
        if (s.target == mean && s.role == export_input_role::buffer && p_.input_types.at(s.value).sizes.size() == 1)
          bn.features = p_.input_types.at(s.value).sizes[0].size;
      found_.push_back(std::move(bn));
    }
    found_[it->second].nodes.push_back(index);
  }

  // The module's buffers are mutated to its last call's statistics.
  void check_last_calls() const {
    for (const export_batchnorm& bn : found_) {
      const export_node& last = p_.nodes[last_call_.at(bn.module)];
      for (const auto& [suffix, output] : {std::pair{kMean, 3}, std::pair{kVar, 4}}) {
        const auto m = mutated_to_.find(bn.module + suffix);
        if (m == mutated_to_.end() || m->second != last.outputs[static_cast<size_t>(output)].values[0])
          fail(last, fmt::format("the program does not write its new statistics to '{}{}' (no buffer mutation of its "
                                 "result)",
                                 printable(bn.module), suffix));
      }
    }
  }

  void add_unreached() {
    for (const std::string& b : buffer_names_) {
      if (!ends_with(b, kMean)) continue;
      const std::string module = b.substr(0, b.size() - kMean.size());
      if (index_.count(module) || !buffer_names_.count(module + kVar) || !buffer_names_.count(module + kCount))
        continue;
      export_batchnorm bn;
      bn.module = module;
      bn.num_batches_tracked = module + kCount;
      bn.reached = false;
      found_.push_back(std::move(bn));
    }
  }

  const export_program& p_;
  const std::string& path_;
  std::unordered_map<int32_t, std::string> buffers_;  // buffer input -> its name
  std::set<std::string> buffer_names_;
  std::unordered_map<int32_t, std::string> chained_;  // a call's new statistic -> the buffer
  std::map<std::string, int32_t> mutated_to_;         // buffer -> the value the program writes to it
  std::map<std::string, size_t> last_call_;
  std::map<std::string, size_t> index_;  // module -> its place in found_
  std::vector<export_batchnorm> found_;
};

}  // namespace

std::vector<export_batchnorm> find_export_batchnorms(const export_program& p, const std::string& path) {
  return batchnorm_finder(p, path).find();
}

}  // namespace swavg
