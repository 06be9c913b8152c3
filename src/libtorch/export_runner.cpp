// A torch.export graph run through LibTorch's dispatcher, on an allow list (see export_runner.h).
#include "libtorch/export_runner.h"

#include <ATen/ScalarOps.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>

#include <fmt/format.h>

#include <iterator>
#include <optional>
#include <set>
#include <unordered_set>

#include "libtorch/tensor_bridge.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/printable.h"
#include "util/version.h"

namespace swavg {
namespace {

// The operators a program may run: functional core ATen, what convolutional and linear models
// export to (torchvision's and timm's CNNs among them), and nothing that reads or writes anything
// but its arguments. Each "name.overload" ("name" for the default overload).
constexpr const char* kExportOperators[] = {
    "_adaptive_avg_pool2d",
    "_adaptive_avg_pool3d",
    "_log_softmax",
    "_native_batch_norm_legit.no_stats",
    "_native_batch_norm_legit_functional",
    "_softmax",
    "_to_copy",
    "_unsafe_index.Tensor",
    "_unsafe_view",
    "abs",
    "add.Scalar",
    "add.Tensor",
    "addmm",
    "alias",
    "amax",
    "amin",
    "arange.start_step",
    "argmax",
    "avg_pool2d",
    "avg_pool3d",
    "bernoulli.p",
    "bmm",
    "cat",
    "ceil",
    "clamp",
    "clamp.Tensor",
    "clone",
    "constant_pad_nd",
    "convolution",
    "copy",
    "cos",
    "div.Scalar",
    "div.Tensor",
    "div.Tensor_mode",
    "elu",
    "embedding",
    "empty.memory_format",
    "empty_permuted",
    "eq.Scalar",
    "erf",
    "exp",
    "expand",
    "expm1",
    "flip",
    "floor",
    "fmod.Scalar",
    "full",
    "full_like",
    "gather",
    "ge.Scalar",
    "gelu",
    "gt.Scalar",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "index.Tensor",
    "index_put",
    "le.Scalar",
    "leaky_relu",
    "log",
    "log1p",
    "logical_not",
    "logit",
    "lt.Scalar",
    "max.dim",
    "max_pool2d_with_indices",
    "max_pool3d_with_indices",
    "maximum",
    "mean.dim",
    "min.dim",
    "minimum",
    "mish",
    "mm",
    "mul.Scalar",
    "mul.Tensor",
    "native_dropout",
    "native_group_norm",
    "native_layer_norm",
    "ne.Scalar",
    "neg",
    "permute",
    "pixel_shuffle",
    "pow.Scalar",
    "pow.Tensor_Scalar",
    "pow.Tensor_Tensor",
    "reciprocal",
    "reflection_pad2d",
    "relu",
    "remainder.Scalar",
    "repeat",
    "roll",
    "round",
    "rsqrt",
    "rsub.Scalar",
    "scalar_tensor",
    "select.int",
    "select_scatter",
    "sigmoid",
    "sign",
    "silu",
    "sin",
    "slice.Tensor",
    "slice_scatter",
    "softplus",
    "split_with_sizes",
    "sqrt",
    "squeeze.default",
    "squeeze.dim",
    "squeeze.dims",
    "sub.Scalar",
    "sub.Tensor",
    "sum.dim_IntList",
    "sym_numel",
    "sym_size.int",
    "sym_stride.int",
    "tanh",
    "trunc",
    "unsqueeze",
    "upsample_bilinear2d.default",
    "upsample_bilinear2d.vec",
    "upsample_nearest2d.default",
    "upsample_nearest2d.vec",
    "var.correction",
    "view",
    "where.ScalarOther",
    "where.ScalarSelf",
    "where.self",
};

const std::set<std::string>& export_operators() {
  static const std::set<std::string> operators(std::begin(kExportOperators), std::end(kExportOperators));
  return operators;
}

// Integer arithmetic on shapes, as torch.export writes it (Python's operator module).
enum class int_op { add, sub, mul, floordiv, mod, neg };
std::optional<int_op> int_op_of(const std::string& target) {
  if (target == "_operator.add") return int_op::add;
  if (target == "_operator.sub") return int_op::sub;
  if (target == "_operator.mul") return int_op::mul;
  if (target == "_operator.floordiv") return int_op::floordiv;
  if (target == "_operator.mod") return int_op::mod;
  if (target == "_operator.neg") return int_op::neg;
  return std::nullopt;
}

enum class source { constant, tensor, tensors, optional_tensors, sym_int, sym_ints };

struct bound_arg {
  source from = source::constant;
  c10::IValue constant;
  std::vector<int32_t> refs;
  std::vector<export_sym_int> syms;
  std::string name;
};

struct bound_node {
  c10::optional<c10::OperatorHandle> op;  // none: integer arithmetic
  int_op arithmetic = int_op::add;
  std::vector<bound_arg> args;
  std::vector<int32_t> drops;  // values read last here
};

std::string target_name(const export_node& n) {
  return fmt::format("node '{}' ({})", printable(n.name), printable(n.target));
}

}  // namespace

bool is_allowed_export_target(const std::string& target) {
  if (int_op_of(target)) return true;
  const std::optional<export_operator> op = export_operator_of(target);
  if (!op || op->name.compare(0, 6, "aten::") != 0) return false;
  const std::string key = op->name.substr(6) + (op->overload.empty() ? "" : "." + op->overload);
  return export_operators().count(key) > 0;
}

struct export_runner::impl {
  const export_program& program;
  std::string path;
  c10::Device device;
  std::vector<bound_node> nodes;

  impl(const export_program& p, std::string file, c10::Device d) : program(p), path(std::move(file)), device(d) {}

  [[noreturn]] void fail(const export_node& n, const std::string& message) const {
    throw input_error(fmt::format("{}: {}: {}", path, target_name(n), message));
  }

  void bind_all();
  bound_node bind(const export_node& n) const;
  bound_arg convert(const export_node& n, const export_arg& a, const c10::Argument& schema) const;
  c10::IValue scalar(const export_node& n, const export_arg& a, const std::string& name) const;
  int64_t integer(const export_sym_int& s, const std::vector<c10::IValue>& values) const;
  void call(size_t index, std::vector<c10::IValue>& values) const;
  void arithmetic(const export_node& n, const bound_node& b, std::vector<c10::IValue>& values) const;
};

void export_runner::impl::bind_all() {
  std::vector<int64_t> last(program.values.size(), -1);
  for (size_t i = 0; i < program.nodes.size(); ++i) {
    nodes.push_back(bind(program.nodes[i]));
    for (const export_input& in : program.nodes[i].inputs) {
      for (int32_t r : in.arg.refs)
        if (r >= 0) last[static_cast<size_t>(r)] = static_cast<int64_t>(i);
      for (const export_sym_int& s : in.arg.syms)
        if (s.ref >= 0) last[static_cast<size_t>(s.ref)] = static_cast<int64_t>(i);
    }
  }
  std::vector<bool> kept(program.values.size(), false);
  for (const export_input_spec& s : program.inputs) kept[static_cast<size_t>(s.value)] = true;
  for (const export_output_spec& s : program.outputs)
    if (s.value >= 0) kept[static_cast<size_t>(s.value)] = true;
  for (size_t v = 0; v < last.size(); ++v)
    if (last[v] >= 0 && !kept[v]) nodes[static_cast<size_t>(last[v])].drops.push_back(static_cast<int32_t>(v));
}

bound_node export_runner::impl::bind(const export_node& n) const {
  bound_node b;
  if (!is_allowed_export_target(n.target))
    fail(n,
         "the operator is not on swavg's list of operators it runs (src/libtorch/export_runner.cpp; docs/update-bn.md "
         "lists them)");
  if (const std::optional<int_op> op = int_op_of(n.target)) {
    b.arithmetic = *op;
    const size_t want = *op == int_op::neg ? 1 : 2;
    if (n.inputs.size() != want || n.outputs.size() != 1 || n.outputs[0].values.size() != 1)
      fail(n, fmt::format("expected {} integer arguments and one result", want));
    for (const export_input& in : n.inputs) {
      if (in.arg.type != export_arg_type::sym_int && in.arg.type != export_arg_type::integer)
        fail(n, fmt::format("argument '{}' is not an integer", printable(in.name)));
      bound_arg a;
      a.from = source::sym_int;
      a.syms =
          in.arg.type == export_arg_type::sym_int ? in.arg.syms : std::vector<export_sym_int>{{in.arg.ints[0], -1}};
      b.args.push_back(std::move(a));
    }
    if (program.values[static_cast<size_t>(n.outputs[0].values[0])].kind != export_value_kind::sym_int)
      fail(n, "its result is not an integer");
    return b;
  }
  const export_operator op = *export_operator_of(n.target);
  b.op = c10::Dispatcher::singleton().findOp(c10::OperatorName(op.name, op.overload));
  if (!b.op)
    fail(n, fmt::format("LibTorch {} has no such operator (torch.export programs need the LibTorch of a torch 2.x "
                        "that exports them: swavg's default build)",
                        SWAVG_LIBTORCH_VERSION));
  const c10::FunctionSchema& schema = b.op->schema();
  if (schema.is_mutable() || schema.is_vararg() || schema.is_varret())
    fail(n, "the operator writes to its arguments; swavg runs functional graphs (ep.run_decompositions())");
  std::set<std::string> used;
  for (const c10::Argument& s : schema.arguments()) {
    const export_input* given = nullptr;
    for (const export_input& in : n.inputs)
      if (in.name == s.name()) given = &in;
    if (given) {
      used.insert(s.name());
      b.args.push_back(convert(n, given->arg, s));
    } else if (s.default_value()) {
      bound_arg a;
      a.constant = *s.default_value();
      a.name = s.name();
      b.args.push_back(std::move(a));
    } else {
      fail(n, fmt::format("argument '{}' is missing; the operator's schema is {}", s.name(), toString(schema)));
    }
  }
  for (const export_input& in : n.inputs)
    if (!used.count(in.name)) fail(n, fmt::format("the operator has no argument '{}'", printable(in.name)));
  if (n.outputs.size() != schema.returns().size())
    fail(n, fmt::format("{} outputs, the operator returns {}", n.outputs.size(), schema.returns().size()));
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const std::string ret = schema.returns()[i].type()->str();
    const bool list = ret == "Tensor[]";
    const bool integer = ret == "int" || ret == "SymInt";
    if (!list && !integer && ret != "Tensor") fail(n, fmt::format("the operator returns {}", ret));
    if (n.outputs[i].list != list)
      fail(n, fmt::format("output {} is {}a list, the operator's is {}", i, n.outputs[i].list ? "" : "not ", ret));
    for (int32_t v : n.outputs[i].values)
      if ((program.values[static_cast<size_t>(v)].kind == export_value_kind::sym_int) != integer)
        fail(n, fmt::format("output {} is not the operator's {}", i, ret));
  }
  return b;
}

c10::IValue export_runner::impl::scalar(const export_node& n, const export_arg& a, const std::string& name) const {
  switch (a.type) {
    case export_arg_type::integer: return c10::IValue(a.ints[0]);
    case export_arg_type::real: return c10::IValue(a.reals[0]);
    case export_arg_type::boolean: return c10::IValue(a.ints[0] != 0);
    default: fail(n, fmt::format("argument '{}' is not a number", name));
  }
}

bound_arg export_runner::impl::convert(const export_node& n, const export_arg& a, const c10::Argument& s) const {
  bound_arg b;
  b.name = s.name();
  c10::TypePtr type = s.real_type();  // ScalarType, Layout, MemoryFormat: type() calls them int
  const bool optional = type->kind() == c10::TypeKind::OptionalType;
  if (optional) type = type->castRaw<c10::OptionalType>()->getElementType();
  const std::string t = type->str();
  const auto wrong = [&]() {
    fail(n, fmt::format("argument '{}' is not of the operator's type {}{}", s.name(), t, optional ? "?" : ""));
  };
  if (a.type == export_arg_type::none) {
    if (!optional) wrong();
    return b;
  }
  if (t == "Tensor") {
    if (a.type == export_arg_type::tensor) {
      b.from = source::tensor;
      b.refs = a.refs;
    } else {
      at::Tensor wrapped = at::scalar_to_tensor(scalar(n, a, s.name()).toScalar());
      wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
      b.constant = wrapped;
    }
  } else if (t == "Tensor[]" || t == "Tensor?[]") {
    if (a.type != (t == "Tensor[]" ? export_arg_type::tensors : export_arg_type::optional_tensors) &&
        !(t == "Tensor?[]" && a.type == export_arg_type::tensors))
      wrong();
    b.from = t == "Tensor[]" ? source::tensors : source::optional_tensors;
    b.refs = a.refs;
  } else if (t == "int" || t == "SymInt") {
    if (a.type == export_arg_type::integer)
      b.constant = a.ints[0];
    else if (a.type == export_arg_type::sym_int && a.syms[0].ref < 0)
      b.constant = a.syms[0].value;
    else if (a.type == export_arg_type::sym_int)
      b.from = source::sym_int, b.syms = a.syms;
    else
      wrong();
  } else if (t == "int[]" || t == "SymInt[]") {
    if (a.type == export_arg_type::integers) {
      b.constant = a.ints;
    } else if (a.type == export_arg_type::sym_ints) {
      b.from = source::sym_ints;
      b.syms = a.syms;
    } else if (a.type == export_arg_type::integer) {
      b.constant = std::vector<int64_t>{a.ints[0]};
    } else {
      wrong();
    }
  } else if (t == "float") {
    if (a.type != export_arg_type::real && a.type != export_arg_type::integer) wrong();
    b.constant = a.type == export_arg_type::real ? a.reals[0] : static_cast<double>(a.ints[0]);
  } else if (t == "float[]") {
    if (a.type != export_arg_type::reals) wrong();
    b.constant = a.reals;
  } else if (t == "bool") {
    if (a.type != export_arg_type::boolean) wrong();
    b.constant = a.ints[0] != 0;
  } else if (t == "bool[]") {
    if (a.type != export_arg_type::booleans) wrong();
    c10::List<bool> list;
    for (int64_t v : a.ints) list.push_back(v != 0);
    b.constant = list;
  } else if (t == "Scalar") {
    b.constant = scalar(n, a, s.name());
  } else if (t == "ScalarType") {
    if (a.type != export_arg_type::scalar_type) wrong();
    const std::optional<dtype> d = export_dtype(a.ints[0]);
    if (!d) fail(n, fmt::format("argument '{}': dtype code {}, which swavg does not know", s.name(), a.ints[0]));
    b.constant = to_scalar_type(*d);
  } else if (t == "Layout") {
    if (a.type != export_arg_type::layout || a.ints[0] != kExportLayoutStrided) wrong();
    b.constant = at::kStrided;
  } else if (t == "MemoryFormat") {
    if (a.type != export_arg_type::memory_format || a.ints[0] < 1 || a.ints[0] > 4) wrong();
    static const at::MemoryFormat kFormats[] = {at::MemoryFormat::Contiguous, at::MemoryFormat::ChannelsLast,
                                                at::MemoryFormat::ChannelsLast3d, at::MemoryFormat::Preserve};
    b.constant = kFormats[a.ints[0] - 1];
  } else if (t == "Device") {
    if (a.type != export_arg_type::device) wrong();
    b.constant = device;
  } else if (t == "str") {
    if (a.type != export_arg_type::text) wrong();
    b.constant = a.text;
  } else {
    fail(n, fmt::format("argument '{}' is of type {}, which swavg does not pass", s.name(), t));
  }
  return b;
}

int64_t export_runner::impl::integer(const export_sym_int& s, const std::vector<c10::IValue>& values) const {
  if (s.ref < 0) return s.value;
  const c10::IValue& v = values[static_cast<size_t>(s.ref)];
  if (v.isInt()) return v.toInt();
  throw input_error(fmt::format("{}: the integer '{}' has no value", path,
                                printable(program.values[static_cast<size_t>(s.ref)].name)));
}

void export_runner::impl::arithmetic(const export_node& n, const bound_node& b,
                                     std::vector<c10::IValue>& values) const {
  const int64_t x = integer(b.args[0].syms[0], values);
  const int64_t y = b.args.size() > 1 ? integer(b.args[1].syms[0], values) : 0;
  int64_t r = 0;
  bool overflow = false;
  switch (b.arithmetic) {
    case int_op::add: overflow = __builtin_add_overflow(x, y, &r); break;
    case int_op::sub: overflow = __builtin_sub_overflow(x, y, &r); break;
    case int_op::mul: overflow = __builtin_mul_overflow(x, y, &r); break;
    case int_op::neg: overflow = __builtin_sub_overflow(int64_t{0}, x, &r); break;
    case int_op::floordiv:
    case int_op::mod:
      if (y == 0 || (x == INT64_MIN && y == -1)) fail(n, fmt::format("{} by {}", x, y));
      r = b.arithmetic == int_op::floordiv ? x / y - ((x % y != 0) && ((x < 0) != (y < 0))) : ((x % y) + y) % y;
      break;
  }
  if (overflow) fail(n, fmt::format("integer overflow on {} and {}", x, y));
  values[static_cast<size_t>(n.outputs[0].values[0])] = r;
}

void export_runner::impl::call(size_t index, std::vector<c10::IValue>& values) const {
  const export_node& n = program.nodes[index];
  const bound_node& b = nodes[index];
  if (!b.op) {
    arithmetic(n, b, values);
    return;
  }
  torch::jit::Stack stack;
  stack.reserve(b.args.size());
  for (const bound_arg& a : b.args) {
    switch (a.from) {
      case source::constant: stack.push_back(a.constant); break;
      case source::tensor: stack.push_back(values[static_cast<size_t>(a.refs[0])]); break;
      case source::tensors: {
        c10::List<at::Tensor> list;
        for (int32_t r : a.refs) list.push_back(values[static_cast<size_t>(r)].toTensor());
        stack.push_back(list);
        break;
      }
      case source::optional_tensors: {
        c10::List<c10::optional<at::Tensor>> list;
        for (int32_t r : a.refs)
          list.push_back(r < 0 ? c10::optional<at::Tensor>() : values[static_cast<size_t>(r)].toTensor());
        stack.push_back(list);
        break;
      }
      case source::sym_int: stack.push_back(integer(a.syms[0], values)); break;
      case source::sym_ints: {
        std::vector<int64_t> ints;
        for (const export_sym_int& s : a.syms) ints.push_back(integer(s, values));
        stack.push_back(ints);
        break;
      }
    }
  }
  b.op->callBoxed(&stack);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    const export_output& out = n.outputs[i];
    if (out.list) {
      const c10::List<at::Tensor> list = stack[i].toTensorList();
      if (list.size() != out.values.size())
        fail(n, fmt::format("returned {} tensors, the graph names {}", list.size(), out.values.size()));
      for (size_t k = 0; k < list.size(); ++k) values[static_cast<size_t>(out.values[k])] = list.get(k);
    } else if (!out.values.empty()) {
      c10::IValue v = std::move(stack[i]);
      if (v.isSymInt()) v = v.toSymInt().expect_int();
      values[static_cast<size_t>(out.values[0])] = std::move(v);
    }
  }
  for (int32_t v : b.drops) values[static_cast<size_t>(v)] = c10::IValue();
}

export_runner::export_runner(const export_program& program, std::string path, c10::Device device)
    : impl_(std::make_unique<impl>(program, std::move(path), device)) {
  impl_->bind_all();
}

export_runner::~export_runner() = default;

void export_runner::set_real(size_t node, const std::string& argument, double value) {
  for (bound_arg& a : impl_->nodes.at(node).args)
    if (a.name == argument && a.from == source::constant && a.constant.isDouble()) {
      a.constant = value;
      return;
    }
  throw std::logic_error("set_real: no float argument " + argument);
}

std::vector<c10::IValue> export_runner::run(const std::vector<at::Tensor>& inputs) {
  const export_program& p = impl_->program;
  if (inputs.size() != p.inputs.size()) throw std::logic_error("export_runner::run: one tensor per input");
  std::vector<c10::IValue> values(p.values.size());
  for (size_t i = 0; i < inputs.size(); ++i) values[static_cast<size_t>(p.inputs[i].value)] = inputs[i];
  for (size_t i = 0; i < p.nodes.size(); ++i) impl_->call(i, values);
  std::vector<c10::IValue> out;
  for (const export_output_spec& s : p.outputs)
    out.push_back(s.value < 0 ? c10::IValue() : values[static_cast<size_t>(s.value)]);
  return out;
}

}  // namespace swavg
