// torch.export's model.json, parsed and validated into an export_program (see export_program.h).
#include "formats/export/export_program.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "formats/core/json_dom.h"
#include "util/error.h"
#include "util/printable.h"
#include "util/text.h"

namespace swavg {
namespace {

using json = nlohmann::json;

std::string quote(std::string_view s) { return fmt::format("'{}'", printable(s)); }

class program_json : public json_dom_parser {
 public:
  explicit program_json(std::string context)
      : json_dom_parser(std::move(context), kMaxExportJsonDepth,
                        fmt::format("JSON nests deeper than {} levels", kMaxExportJsonDepth), "not valid JSON: ") {}

 private:
  std::string duplicate_key(const std::string& k) const override { return "duplicate key " + quote(k); }
};

// Builds the program from the DOM, failing with the context of the file.
class program_reader {
 public:
  explicit program_reader(std::string context) : context_(std::move(context)) {}

  [[noreturn]] void fail(const std::string& message) const {
    throw input_error(fmt::format("{}: {}", context_, message));
  }

  const json& field(const json& object, const char* key, const std::string& where) const {
    if (!object.is_object()) fail(fmt::format("{} is not a JSON object", where));
    const auto it = object.find(key);
    if (it == object.end()) fail(fmt::format("{} has no \"{}\"", where, key));
    return *it;
  }
  const json& array(const json& object, const char* key, const std::string& where) const {
    const json& a = field(object, key, where);
    if (!a.is_array()) fail(fmt::format("\"{}\" of {} is not a list", key, where));
    return a;
  }
  std::string text(const json& v, const std::string& where) const {
    if (!v.is_string()) fail(where + " is not a string");
    return v.get<std::string>();
  }
  int64_t integer(const json& v, const std::string& where) const {
    if (v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}))
      return v.get<int64_t>();
    fail(where + " is not a 64-bit integer");
  }
  double real(const json& v, const std::string& where) const {
    if (!v.is_number()) fail(where + " is not a number");
    return v.get<double>();
  }
  bool boolean(const json& v, const std::string& where) const {
    if (!v.is_boolean()) fail(where + " is not true or false");
    return v.get<bool>();
  }
  // The one tag of a union ({"as_tensor": {...}}).
  std::pair<std::string, const json*> tag(const json& u, const std::string& where) const {
    if (!u.is_object() || u.size() != 1) fail(where + " is not a union of one tag");
    return {u.begin().key(), &u.begin().value()};
  }

  int32_t define(const std::string& name, export_value_kind kind, const std::string& where) {
    if (name.empty()) fail(where + " defines a value without a name");
    if (!ids_.emplace(name, static_cast<int32_t>(p_.values.size())).second)
      fail(fmt::format("{} defines {}, which is defined before", where, quote(name)));
    p_.values.push_back(export_value{name, kind});
    return static_cast<int32_t>(p_.values.size() - 1);
  }
  int32_t use(const json& named, export_value_kind kind, const std::string& where) const {
    const std::string name = text(field(named, "name", where), where + "'s name");
    const auto it = ids_.find(name);
    if (it == ids_.end()) fail(fmt::format("{} reads {}, which no earlier node or input defines", where, quote(name)));
    if (p_.values[static_cast<size_t>(it->second)].kind != kind)
      fail(fmt::format("{} reads {} as {}, but it is {}", where, quote(name),
                       kind == export_value_kind::tensor ? "a tensor" : "an integer",
                       kind == export_value_kind::tensor ? "an integer" : "a tensor"));
    return it->second;
  }

  export_sym_int sym_int(const json& v, const std::string& where) const {
    const auto [t, value] = tag(v, where);
    if (t == "as_int") return export_sym_int{integer(*value, where), -1};
    if (t == "as_name") {
      json named = {{"name", *value}};
      return export_sym_int{0, use(named, export_value_kind::sym_int, where)};
    }
    fail(fmt::format("{} is a symbolic integer tagged {}, expected as_int or as_name", where, quote(t)));
  }

  export_arg argument(const json& u, const std::string& where) const;
  void parse(const json& root);
  export_program take() { return std::move(p_); }

 private:
  void parse_ranges(const json& root);
  void parse_inputs(const json& graph, const json& signature);
  void parse_input_type(const json& tensor_values, int32_t value);
  void parse_nodes(const json& graph);
  void parse_outputs(const json& graph, const json& signature);
  void check_targets() const;

  std::string context_;
  export_program p_;
  std::unordered_map<std::string, int32_t> ids_;
};

export_arg program_reader::argument(const json& u, const std::string& where) const {
  const auto tagged = tag(u, where);
  const std::string& t = tagged.first;
  const json* v = tagged.second;
  export_arg a;
  const auto each = [&](auto&& f) {
    if (!v->is_array()) fail(fmt::format("{} ({}) is not a list", where, t));
    for (const json& item : *v) f(item);
  };
  if (t == "as_none") {
    a.type = export_arg_type::none;
  } else if (t == "as_tensor" || t == "as_optional_tensor") {
    if (t == "as_optional_tensor") {
      const auto [inner, value] = tag(*v, where);
      if (inner == "as_none") return a;
      if (inner != "as_tensor") fail(fmt::format("{} is an optional tensor tagged {}", where, quote(inner)));
      a.refs.push_back(use(*value, export_value_kind::tensor, where));
    } else {
      a.refs.push_back(use(*v, export_value_kind::tensor, where));
    }
    a.type = export_arg_type::tensor;
  } else if (t == "as_tensors") {
    a.type = export_arg_type::tensors;
    each([&](const json& item) { a.refs.push_back(use(item, export_value_kind::tensor, where)); });
  } else if (t == "as_optional_tensors") {
    a.type = export_arg_type::optional_tensors;
    each([&](const json& item) {
      const auto [inner, value] = tag(item, where);
      if (inner == "as_none")
        a.refs.push_back(-1);
      else if (inner == "as_tensor")
        a.refs.push_back(use(*value, export_value_kind::tensor, where));
      else
        fail(fmt::format("{} holds an optional tensor tagged {}", where, quote(inner)));
    });
  } else if (t == "as_int" || t == "as_scalar_type" || t == "as_memory_format" || t == "as_layout") {
    a.type = t == "as_int"             ? export_arg_type::integer
             : t == "as_scalar_type"   ? export_arg_type::scalar_type
             : t == "as_memory_format" ? export_arg_type::memory_format
                                       : export_arg_type::layout;
    a.ints.push_back(integer(*v, where));
  } else if (t == "as_ints") {
    a.type = export_arg_type::integers;
    each([&](const json& item) { a.ints.push_back(integer(item, where)); });
  } else if (t == "as_float") {
    a.type = export_arg_type::real;
    a.reals.push_back(real(*v, where));
  } else if (t == "as_floats") {
    a.type = export_arg_type::reals;
    each([&](const json& item) { a.reals.push_back(real(item, where)); });
  } else if (t == "as_bool") {
    a.type = export_arg_type::boolean;
    a.ints.push_back(boolean(*v, where));
  } else if (t == "as_bools") {
    a.type = export_arg_type::booleans;
    each([&](const json& item) { a.ints.push_back(boolean(item, where)); });
  } else if (t == "as_string") {
    a.type = export_arg_type::text;
    a.text = text(*v, where);
  } else if (t == "as_sym_int") {
    a.type = export_arg_type::sym_int;
    a.syms.push_back(sym_int(*v, where));
  } else if (t == "as_sym_ints") {
    a.type = export_arg_type::sym_ints;
    each([&](const json& item) { a.syms.push_back(sym_int(item, where)); });
  } else if (t == "as_device") {
    a.type = export_arg_type::device;
    a.text = text(field(*v, "type", where), where + "'s device type");
    const auto index = v->find("index");
    a.ints.push_back(index == v->end() || index->is_null() ? -1 : integer(*index, where + "'s device index"));
  } else {
    fail(fmt::format("{} is an argument of kind {}, which swavg does not pass", where, quote(t)));
  }
  return a;
}

void program_reader::parse(const json& root) {
  const json& version = field(root, "schema_version", "the program");
  const int64_t major = integer(field(version, "major", "schema_version"), "schema_version.major");
  if (major != kExportSchemaMajor)
    fail(fmt::format("export schema version {}, swavg reads schema {} (torch 2.14's torch.export.save)", major,
                     kExportSchemaMajor));
  const json& verifiers = array(root, "verifiers", "the program");
  if (verifiers.size() != 1) fail(fmt::format("{} verifiers, expected one", verifiers.size()));
  p_.verifier = text(verifiers.front(), "the verifier");
  parse_ranges(root);
  const json& module = field(root, "graph_module", "the program");
  const json& graph = field(module, "graph", "graph_module");
  const json& signature = field(module, "signature", "graph_module");
  parse_inputs(graph, signature);
  parse_nodes(graph);
  parse_outputs(graph, signature);
  check_targets();
}

void program_reader::parse_ranges(const json& root) {
  const auto it = root.find("range_constraints");
  if (it == root.end()) return;
  if (!it->is_object()) fail("range_constraints is not a JSON object");
  for (const auto& [symbol, range] : it->items()) {
    const std::string where = "the range of " + quote(symbol);
    export_range r;
    const json& lo = field(range, "min_val", where);
    const json& hi = field(range, "max_val", where);
    if (!lo.is_null()) r.min = integer(lo, where + "'s min_val");
    if (!hi.is_null()) r.max = integer(hi, where + "'s max_val");
    if (r.max && *r.max < r.min) fail(fmt::format("{} is empty: {}..{}", where, r.min, *r.max));
    p_.ranges.emplace(symbol, r);
  }
}

void program_reader::parse_inputs(const json& graph, const json& signature) {
  const json& specs = array(signature, "input_specs", "the signature");
  const json& inputs = array(graph, "inputs", "the graph");
  if (inputs.size() != specs.size())
    fail(fmt::format("the graph has {} inputs, its signature {}", inputs.size(), specs.size()));
  const json& tensor_values = field(graph, "tensor_values", "the graph");
  std::unordered_set<std::string> targets;
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string where = fmt::format("input spec {}", i);
    const auto [kind, spec] = tag(specs[i], where);
    export_input_spec s;
    const json* arg = &field(*spec, "arg", where);
    if (kind == "user_input") {
      const auto [t, named] = tag(*arg, where);
      if (t != "as_tensor") fail(fmt::format("{}: a user input tagged {}; swavg passes one tensor", where, quote(t)));
      arg = named;
    } else if (kind == "parameter") {
      s.role = export_input_role::parameter;
      s.target = text(field(*spec, "parameter_name", where), where + "'s parameter_name");
    } else if (kind == "buffer") {
      s.role = export_input_role::buffer;
      s.target = text(field(*spec, "buffer_name", where), where + "'s buffer_name");
      s.persistent = boolean(field(*spec, "persistent", where), where + "'s persistent");
    } else if (kind == "tensor_constant") {
      s.role = export_input_role::constant;
      s.target = text(field(*spec, "tensor_constant_name", where), where + "'s tensor_constant_name");
    } else {
      fail(
          fmt::format("{} is of kind {}, which swavg does not bind (it binds parameters, buffers, tensor "
                      "constants and the user's tensors)",
                      where, quote(kind)));
    }
    if (s.role != export_input_role::user_input && !targets.insert(s.target).second)
      fail(fmt::format("{} binds {} a second time", where, quote(s.target)));
    const std::string name = text(field(*arg, "name", where), where + "'s name");
    const auto [t, graph_input] = tag(inputs[i], fmt::format("graph input {}", i));
    if (t != "as_tensor" || text(field(*graph_input, "name", "graph input"), "graph input") != name)
      fail(fmt::format("graph input {} is not {}, which its signature names", i, quote(name)));
    s.value = define(name, export_value_kind::tensor, where);
    parse_input_type(tensor_values, s.value);
    p_.inputs.push_back(std::move(s));
  }
}

void program_reader::parse_input_type(const json& tensor_values, int32_t value) {
  const std::string& name = p_.values[static_cast<size_t>(value)].name;
  const std::string where = "the type of input " + quote(name);
  const json& meta = field(tensor_values, name.c_str(), "tensor_values");
  export_tensor_type type;
  const int64_t code = integer(field(meta, "dtype", where), where + "'s dtype");
  const std::optional<dtype> t = export_dtype(code);
  if (!t) fail(fmt::format("{}: dtype code {}, which swavg does not know", where, code));
  type.type = *t;
  for (const json& size : array(meta, "sizes", where)) {
    const auto [tag_name, v] = tag(size, where + "'s size");
    export_dim d;
    if (tag_name == "as_int") {
      d.size = integer(*v, where + "'s size");
      if (d.size < 0) fail(fmt::format("{}: size {}", where, d.size));
    } else if (tag_name == "as_expr") {
      const std::string expr = text(field(*v, "expr_str", where), where + "'s expr_str");
      const std::string prefix = "Symbol('";
      if (starts_with(expr, prefix) && expr.find('\'', prefix.size()) != std::string::npos)
        d.symbol = expr.substr(prefix.size(), expr.find('\'', prefix.size()) - prefix.size());
      else if (!expr.empty() && expr.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") == std::string::npos)
        d.symbol = expr;
      if (d.symbol.empty()) fail(fmt::format("{}: a size of {}, not a constant or a symbol", where, quote(expr)));
      if (!p_.ranges.count(d.symbol)) p_.ranges.emplace(d.symbol, export_range{});
    } else {
      fail(fmt::format("{}: a size tagged {}", where, quote(tag_name)));
    }
    type.sizes.push_back(std::move(d));
  }
  p_.input_types.emplace(value, std::move(type));
}

void program_reader::parse_nodes(const json& graph) {
  for (const json& n : array(graph, "nodes", "the graph")) {
    export_node node;
    node.target = text(field(n, "target", "a node"), "a node's target");
    const auto name = n.find("name");
    node.name = name != n.end() && name->is_string() ? name->get<std::string>() : "";
    const std::string where = fmt::format("node {} ({})", quote(node.name), printable(node.target));
    std::unordered_set<std::string> seen;
    for (const json& input : array(n, "inputs", where)) {
      export_input in;
      in.name = text(field(input, "name", where), where + "'s argument name");
      if (!seen.insert(in.name).second) fail(fmt::format("{} passes argument {} twice", where, quote(in.name)));
      in.arg = argument(field(input, "arg", where), fmt::format("{}'s argument {}", where, quote(in.name)));
      node.inputs.push_back(std::move(in));
    }
    for (const json& output : array(n, "outputs", where)) {
      const auto [t, v] = tag(output, where + "'s output");
      export_output out;
      if (t == "as_tensor") {
        out.values.push_back(define(text(field(*v, "name", where), where), export_value_kind::tensor, where));
      } else if (t == "as_sym_int") {
        const auto [inner, sym] = tag(*v, where + "'s output");
        if (inner != "as_name") fail(where + " outputs a constant integer");
        out.values.push_back(define(text(*sym, where), export_value_kind::sym_int, where));
      } else if (t == "as_tensors") {
        out.list = true;
        if (!v->is_array()) fail(where + "'s output list is not a list");
        for (const json& item : *v)
          out.values.push_back(define(text(field(item, "name", where), where), export_value_kind::tensor, where));
      } else if (t != "as_none") {
        fail(fmt::format("{} has an output of kind {}, which swavg does not take", where, quote(t)));
      }
      node.outputs.push_back(std::move(out));
    }
    if (node.name.empty() && !node.outputs.empty() && !node.outputs.front().values.empty())
      node.name = p_.values[static_cast<size_t>(node.outputs.front().values.front())].name;
    p_.nodes.push_back(std::move(node));
  }
}

void program_reader::parse_outputs(const json& graph, const json& signature) {
  const json& specs = array(signature, "output_specs", "the signature");
  const json& outputs = array(graph, "outputs", "the graph");
  if (outputs.size() != specs.size())
    fail(fmt::format("the graph has {} outputs, its signature {}", outputs.size(), specs.size()));
  std::unordered_set<std::string> mutated;
  for (size_t i = 0; i < specs.size(); ++i) {
    const std::string where = fmt::format("output spec {}", i);
    const auto [kind, spec] = tag(specs[i], where);
    export_output_spec s;
    const json& arg = field(*spec, "arg", where);
    std::string name;
    if (kind == "user_output" || kind == "loss_output") {
      const auto [t, v] =
          kind == "loss_output" ? std::pair<std::string, const json*>{"as_tensor", &arg} : tag(arg, where);
      if (t == "as_tensor") {
        s.value = use(*v, export_value_kind::tensor, where);
        name = p_.values[static_cast<size_t>(s.value)].name;
      }
    } else if (kind == "buffer_mutation" || kind == "user_input_mutation") {
      s.role =
          kind == "buffer_mutation" ? export_output_role::buffer_mutation : export_output_role::user_input_mutation;
      s.value = use(arg, export_value_kind::tensor, where);
      name = p_.values[static_cast<size_t>(s.value)].name;
      s.target = text(field(*spec, kind == "buffer_mutation" ? "buffer_name" : "user_input_name", where), where);
      if (!mutated.insert(s.target).second) fail(fmt::format("{} mutates {} a second time", where, quote(s.target)));
    } else {
      fail(fmt::format("{} is of kind {}, which swavg does not take", where, quote(kind)));
    }
    const auto [t, graph_output] = tag(outputs[i], fmt::format("graph output {}", i));
    if (!name.empty() && (t != "as_tensor" || text(field(*graph_output, "name", "graph output"), "") != name))
      fail(fmt::format("graph output {} is not {}, which its signature names", i, quote(name)));
    p_.outputs.push_back(std::move(s));
  }
}

// Every mutation names an input of its kind.
void program_reader::check_targets() const {
  for (const export_output_spec& o : p_.outputs) {
    if (o.role == export_output_role::user_output) continue;
    bool found = false;
    for (const export_input_spec& in : p_.inputs) {
      if (o.role == export_output_role::buffer_mutation)
        found |= in.role == export_input_role::buffer && in.target == o.target;
      else
        found |= in.role == export_input_role::user_input && p_.values[static_cast<size_t>(in.value)].name == o.target;
    }
    if (!found)
      fail(fmt::format("an output mutates {}, which is no {} of the program", quote(o.target),
                       o.role == export_output_role::buffer_mutation ? "buffer" : "user input"));
  }
}

}  // namespace

std::optional<dtype> export_dtype(int64_t code) {
  switch (code) {
    case 1: return dtype::uint8;
    case 2: return dtype::int8;
    case 3: return dtype::int16;
    case 4: return dtype::int32;
    case 5: return dtype::int64;
    case 6: return dtype::float16;
    case 7: return dtype::float32;
    case 8: return dtype::float64;
    case 10: return dtype::complex64;
    case 11: return dtype::complex128;
    case 12: return dtype::bool_;
    case 13: return dtype::bfloat16;
    default: return std::nullopt;
  }
}

json read_export_json(std::string_view text, const std::string& context) {
  program_json parser(context);
  return parser.parse(text);
}

export_program parse_export_program(std::string_view text, const std::string& context) {
  const json root = read_export_json(text, context);
  program_reader reader(context);
  reader.parse(root);
  return reader.take();
}

std::optional<export_operator> export_operator_of(const std::string& target) {
  const std::string prefix = "torch.ops.";
  if (!starts_with(target, prefix)) return std::nullopt;
  const std::string rest = target.substr(prefix.size());
  const size_t a = rest.find('.');
  const size_t b = a == std::string::npos ? a : rest.find('.', a + 1);
  if (b == std::string::npos || rest.find('.', b + 1) != std::string::npos || a == 0 || b == a + 1 ||
      b + 1 == rest.size())
    return std::nullopt;
  export_operator op;
  op.name = rest.substr(0, a) + "::" + rest.substr(a + 1, b - a - 1);
  op.overload = rest.substr(b + 1);
  if (op.overload == "default") op.overload.clear();
  return op;
}

std::string export_type_text(const export_tensor_type& t) {
  std::vector<std::string> dims;
  for (const export_dim& d : t.sizes) dims.push_back(d.symbol.empty() ? std::to_string(d.size) : d.symbol);
  return fmt::format("[{}]", fmt::join(dims, ", "));
}

}  // namespace swavg
