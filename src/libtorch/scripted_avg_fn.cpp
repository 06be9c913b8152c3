/*
 * --avg-fn and --multi-avg-fn: a user's TorchScript averaging function, run as
 * AveragedModel.update_parameters runs avg_fn (PyTorch 1.13) and multi_avg_fn (2.x); see
 * fold/avg_fn.h. The file is checked (format, then forward's schema) before any output exists; the
 * tensors it sees are the inputs' mapped bytes where the dtype already matches, the accumulator
 * otherwise, and its result is copied back with copy_ (PyTorch's broadcasting and casting).
 *
 * As AveragedModel, the function is handed detached aliases (new tensors over the same storage) of
 * the averages and of the current checkpoint's tensors: re-striding an alias in place (a.t_())
 * leaves the average as it is, writes through it land in the average. After every call each
 * average must be what it was (its alias still over its storage, with its dtype, device and number
 * of elements; the storage not reallocated by a resize), and values that turned NaN or Inf from
 * finite inputs are the function's doing: both are input_error naming the function and the tensor.
 */
#include <ATen/Functions.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/api/module.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <optional>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "fold/avg_fn.h"
#include "fold/int_average.h"
#include "formats/io/input_kinds.h"
#include "libtorch/module.h"
#include "libtorch/tensor_bridge.h"
#include "util/error.h"

namespace swavg {
namespace {

const char* expected_signature(avg_fn_kind k) {
  return k == avg_fn_kind::avg_fn ? "forward(Tensor averaged, Tensor current, Tensor num_averaged) -> Tensor"
                                  : "forward(List[Tensor] averaged, List[Tensor] current, Tensor num_averaged) -> None";
}

// forward's signature without `self`, in Python's annotations.
std::string signature_of(const c10::FunctionSchema& s) {
  std::vector<std::string> args;
  for (size_t i = 1; i < s.arguments().size(); ++i)
    args.push_back(fmt::format("{} {}", s.arguments()[i].type()->annotation_str(), s.arguments()[i].name()));
  std::vector<std::string> returns;
  for (const auto& r : s.returns()) returns.push_back(r.type()->annotation_str());
  const std::string ret = returns.size() == 1 ? returns.front() : fmt::format("({})", fmt::join(returns, ", "));
  return fmt::format("forward({}) -> {}", fmt::join(args, ", "), ret == "NoneType" ? "None" : ret);
}

bool has_signature(const c10::FunctionSchema& s, avg_fn_kind k) {
  const auto& a = s.arguments();
  if (a.size() != 4 || s.returns().size() != 1 || s.is_vararg() || s.is_varret()) return false;
  const c10::TypePtr tensor = c10::TensorType::get();
  const c10::TypePtr data = k == avg_fn_kind::avg_fn ? tensor : c10::ListType::create(tensor);
  const c10::TypePtr result = k == avg_fn_kind::avg_fn ? tensor : c10::NoneType::get();
  return *a[1].type() == *data && *a[2].type() == *data && *a[3].type() == *tensor && *s.returns()[0].type() == *result;
}

at::Tensor input_tensor(const tensor_view& v, at::ScalarType type, const at::Device& device) {
  const at::Tensor t = to_tensor(v);
  return t.scalar_type() == type && device.is_cpu() ? t : t.to(device, type);
}

// The first checkpoint is copied: a tensor over the mapped input is cloned, a converted one kept.
at::Tensor owned(const at::Tensor& x, const tensor_view& v) {
  return x.numel() > 0 && x.data_ptr() == static_cast<const void*>(v.data()) ? x.clone() : x;
}

at::Tensor count_tensor(int64_t n, const at::Device& device) {
  return at::scalar_tensor(n, at::TensorOptions().dtype(at::kLong).device(device));
}

// glibc keeps freed tensor-sized blocks in its heap once its mmap threshold has adapted to them, so
// without this the resident set grows with each tensor the function allocates temporaries for.
void return_freed_memory() {
#ifdef __GLIBC__
  malloc_trim(0);
#endif
}

at::Tensor output_tensor(const at::Tensor& acc, const tensor_plan& p) {
  at::Tensor out = acc.to(at::kCPU, to_scalar_type(p.outcome.output_type));
  return out.contiguous();
}

// An average as it was before a call: what the call may not change.
struct kept_average {
  explicit kept_average(const at::Tensor& acc) : data(acc.numel() > 0 ? acc.data_ptr() : nullptr) {}
  const void* data;
};

// What a call changed about the average `acc` through its alias `alias`, or nullopt.
std::optional<std::string> change_of(const at::Tensor& acc, const kept_average& before, const at::Tensor& alias) {
  if (alias.scalar_type() != acc.scalar_type())
    return fmt::format("its dtype changed from {} to {}", c10::toString(acc.scalar_type()),
                       c10::toString(alias.scalar_type()));
  if (alias.device() != acc.device())
    return fmt::format("it moved from {} to {}", acc.device().str(), alias.device().str());
  if (alias.numel() != acc.numel())
    return fmt::format("it was resized from [{}] to [{}]", fmt::join(acc.sizes(), ", "),
                       fmt::join(alias.sizes(), ", "));
  if (acc.numel() > 0 && acc.data_ptr() != before.data)
    return std::string("its storage was reallocated (resized in place)");
  if (acc.numel() > 0 && !alias.is_alias_of(acc)) return std::string("it was given other storage (set_)");
  return std::nullopt;
}

bool all_finite(const at::Tensor& t) {
  if (!(c10::isFloatingType(t.scalar_type()) || c10::isComplexType(t.scalar_type())) || t.numel() == 0) return true;
  return at::isfinite(t).all().item<bool>();
}

class script_avg_fn : public avg_function {
 public:
  script_avg_fn(const avg_fn_spec& spec, std::shared_ptr<torch::jit::Module> module)
      : spec_(spec), module_(std::move(module)), forward_(module_->get_method("forward")) {}

  void average(const fold_config& c, const tensor_plan& p, const chunk_writer& write) override {
    const at::Device device = to_device(c.device);
    const at::ScalarType acc_type = to_scalar_type(p.outcome.accumulate_type);
    at::Tensor acc;
    int64_t k = 0;
    if (p.resumed) {
      acc = to_tensor(*p.resumed).to(device, acc_type, /*non_blocking=*/false, /*copy=*/true);
      k = p.resumed_count;
    }
    bool finite = !c.allow_nonfinite;  // checked after each call until an input brings NaN or Inf
    for (size_t j = 0; j < p.sources.size(); ++j) {
      const tensor_view& v = *p.sources[j].view;
      const at::Tensor x = input_tensor(v, acc_type, device);
      if (k == 0) {
        acc = owned(x, v);
      } else {
        const kept_average before(acc);
        const at::Tensor alias = acc.detach();
        at::Tensor result;
        call(fmt::format("tensor '{}'", p.name), [&] {
          result = forward_({alias, x.detach(), count_tensor(k, device)}).toTensor();
        });
        check_kept(p.name, k, acc, before, alias);
        call(fmt::format("tensor '{}'", p.name), [&] { acc.copy_(result); });
        if (finite) finite = check_finite(p, k, j, acc);
      }
      ++k;
      release_pages(v);
    }
    acc = output_tensor(acc, p);
    write(acc.data_ptr(), acc.nbytes());
    acc = at::Tensor();
    return_freed_memory();
  }

  std::vector<tensor_view> average_all(const fold_config& c, const std::vector<const tensor_plan*>& tensors) override {
    if (tensors.empty()) return {};
    check_same_inputs(tensors);
    const at::Device device = to_device(c.device);
    std::vector<at::Tensor> accs(tensors.size());
    std::vector<bool> finite(tensors.size(), !c.allow_nonfinite);
    int64_t k = 0;
    if (tensors.front()->resumed) {
      for (size_t i = 0; i < tensors.size(); ++i)
        accs[i] = to_tensor(*tensors[i]->resumed)
                      .to(device, to_scalar_type(tensors[i]->outcome.accumulate_type), false, /*copy=*/true);
      k = tensors.front()->resumed_count;
    }
    for (size_t j = 0; j < tensors.front()->sources.size(); ++j, ++k) {
      std::vector<at::Tensor> current(tensors.size());
      for (size_t i = 0; i < tensors.size(); ++i)
        current[i] =
            input_tensor(*tensors[i]->sources[j].view, to_scalar_type(tensors[i]->outcome.accumulate_type), device);
      if (k == 0) {
        for (size_t i = 0; i < tensors.size(); ++i) accs[i] = owned(current[i], *tensors[i]->sources[j].view);
      } else {
        call_lists(tensors, accs, current, k, device, /*integers=*/false);
        call_lists(tensors, accs, current, k, device, /*integers=*/true);
        for (size_t i = 0; i < tensors.size(); ++i)
          if (finite[i]) finite[i] = check_finite(*tensors[i], k, j, accs[i]);
      }
      for (const tensor_plan* p : tensors) release_pages(*p->sources[j].view);
      current.clear();
      return_freed_memory();
    }
    std::vector<tensor_view> out;
    out.reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      out.push_back(from_tensor(output_tensor(accs[i], *tensors[i])));
      accs[i] = at::Tensor();
    }
    return out;
  }

  std::string signature() const override { return signature_of(forward_.function().getSchema()); }

 private:
  // Runs `step` (the function and what is done with its result); LibTorch's errors name the file.
  template <typename F>
  void call(const std::string& what, const F& step) {
    try {
      step();
    } catch (const std::exception& e) {
      throw input_error(fmt::format("{} {}: the function failed on {}: {}", avg_fn_option(spec_.kind), spec_.path, what,
                                    error_text(e)));
    }
  }

  // One call with the floating tensors (or the integer ones, --buffers average) in plan order, as
  // detached aliases; then every average checked.
  void call_lists(const std::vector<const tensor_plan*>& tensors, const std::vector<at::Tensor>& accs,
                  const std::vector<at::Tensor>& current, int64_t k, const at::Device& device, bool integers) {
    c10::List<at::Tensor> averaged, now;
    std::vector<size_t> passed;
    std::vector<kept_average> before;
    std::vector<at::Tensor> aliases;
    for (size_t i = 0; i < tensors.size(); ++i)
      if (is_integer_average(*tensors[i]) == integers) {
        passed.push_back(i);
        before.emplace_back(accs[i]);
        aliases.push_back(accs[i].detach());
        averaged.push_back(aliases.back());
        now.push_back(current[i].detach());
      }
    if (averaged.empty()) return;
    call(fmt::format("checkpoint {} ({} tensors)", k + 1, integers ? "integer" : "floating"), [&] {
      forward_({averaged, now, count_tensor(k, device)});
    });
    for (size_t a = 0; a < passed.size(); ++a)
      check_kept(tensors[passed[a]]->name, k, accs[passed[a]], before[a], aliases[a]);
  }

  // input_error when the call at checkpoint k + 1 changed the average `acc` of `name` (see change_of).
  void check_kept(const std::string& name, int64_t k, const at::Tensor& acc, const kept_average& before,
                  const at::Tensor& alias) const {
    if (const auto change = change_of(acc, before, alias))
      throw input_error(fmt::format(
          "{} {}: the function changed the average of tensor '{}' in place at checkpoint {}: {} (expected shape [{}], "
          "dtype {}, device {}); an averaging function updates each average's values only",
          avg_fn_option(spec_.kind), spec_.path, name, k + 1, *change, fmt::join(acc.sizes(), ", "),
          c10::toString(acc.scalar_type()), acc.device().str()));
  }

  // After the call at checkpoint k + 1 (the plan's source j): true while `acc` is finite. NaN or Inf
  // from finite inputs (the resumed average and sources 0..j) is the function's, an input_error;
  // from non-finite inputs it is theirs, reported with the files when the tensor is written.
  bool check_finite(const tensor_plan& p, int64_t k, size_t j, const at::Tensor& acc) const {
    if (all_finite(acc)) return true;
    if (p.resumed && !all_finite(to_tensor(*p.resumed))) return false;
    for (size_t i = 0; i <= j; ++i)
      if (!all_finite(to_tensor(*p.sources[i].view))) return false;
    throw input_error(fmt::format(
        "{} {}: the function produced NaN or Inf values in tensor '{}' at checkpoint {}, from finite inputs; pass "
        "--allow-nonfinite to keep them",
        avg_fn_option(spec_.kind), spec_.path, p.name, k + 1));
  }

  // The list function sees one checkpoint's tensors at a time: every tensor must be in the same inputs.
  void check_same_inputs(const std::vector<const tensor_plan*>& tensors) const {
    const tensor_plan& first = *tensors.front();
    for (const tensor_plan* p : tensors) {
      bool same = p->sources.size() == first.sources.size() && (p->resumed != nullptr) == (first.resumed != nullptr) &&
                  p->resumed_count == first.resumed_count;
      for (size_t j = 0; same && j < p->sources.size(); ++j) same = p->sources[j].input == first.sources[j].input;
      if (!same)
        throw usage_error(fmt::format(
            "{}: tensor '{}' is averaged over {} checkpoints and '{}' over {}: a list function needs every averaged "
            "tensor in every input (drop --allow-missing)",
            avg_fn_option(spec_.kind), p->name, p->outcome.count, first.name, first.outcome.count));
    }
  }

  avg_fn_spec spec_;
  std::shared_ptr<torch::jit::Module> module_;
  torch::jit::Method forward_;
};

}  // namespace

std::unique_ptr<avg_function> load_avg_fn(const avg_fn_spec& spec) {
  const std::string what = fmt::format("{} {}", avg_fn_option(spec.kind), spec.path);
  const std::string expected = fmt::format(
      "expected TorchScript with {} ({})", expected_signature(spec.kind),
      spec.kind == avg_fn_kind::avg_fn ? "torch.jit.script(f).save(FILE)" : "torch.jit.script(module).save(FILE)");
  input_kind kind = input_kind::torch;
  try {
    kind = detect_input_kind(spec.path);
  } catch (const input_error& e) {
    throw usage_error(fmt::format("{}: {}, found something else: {}", what, expected, e.what()));
  }
  if (kind == input_kind::export_program)
    throw usage_error(
        fmt::format("{}: {}, found a torch.export program, which is fixed to its example inputs' number, "
                    "ranks and dtypes while the function runs over every tensor (docs/update-bn.md, "
                    "\"Averaging functions\")",
                    what, expected));
  if (kind != input_kind::torchscript)
    throw usage_error(fmt::format("{}: {}, found {}", what, expected, input_kind_description(kind)));
  std::shared_ptr<torch::jit::Module> module;
  try {
    module = load_module(spec.path);
  } catch (const input_error& e) {
    throw usage_error(fmt::format("{}: {}: {}", what, expected, e.what()));
  }
  const auto forward = module->find_method("forward");
  if (!forward) throw usage_error(fmt::format("{}: {}, found a module without forward", what, expected));
  const c10::FunctionSchema& schema = forward->function().getSchema();
  if (!has_signature(schema, spec.kind))
    throw usage_error(fmt::format("{}: {}, found {}", what, expected, signature_of(schema)));
  return std::make_unique<script_avg_fn>(spec, std::move(module));
}

}  // namespace swavg
