/*
 * A torch.export program as torch.export.save writes it (models/model.json, export schema 8), parsed
 * and validated without LibTorch and without running anything: the graph's nodes in order, each an
 * operator named by its target ("torch.ops.aten.convolution.default") with named arguments; the
 * signature binding the graph's inputs to parameters, buffers, constants and the user's input, and
 * its outputs to the user's output and buffer mutations; the declared type of every input.
 *
 * Values (tensors and the integers shape arithmetic computes) are numbered in definition order:
 * the inputs first, then each node's outputs. The parse refuses what could make a reader see
 * another graph than torch.export.load does, or make a runner read outside what the graph defines:
 * duplicate keys, a value defined twice, a node reading a value no input or earlier node defines,
 * graph inputs or outputs that disagree with the signature, an input or output kind swavg does not
 * bind (custom objects, tokens, constant inputs), an argument kind it does not pass (graphs,
 * custom objects, operators), nesting past kMaxExportJsonDepth. Which operators may run is the
 * runner's list (src/libtorch/export_runner.cpp), not the reader's: inspect reads any program.
 */
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/dtype.h"

namespace swavg {

constexpr int kExportSchemaMajor = 8;    // torch 2.14 writes 8.20
constexpr int kMaxExportJsonDepth = 64;  // model.json nests about 10 deep

// The export schema's numbering (torch/_export/serde/schema.py), not c10's.
std::optional<dtype> export_dtype(int64_t code);
constexpr int64_t kExportLayoutStrided = 7;

enum class export_arg_type {
  none,
  tensor,
  tensors,
  optional_tensors,  // refs, -1 for None
  integer,
  integers,
  real,
  reals,
  boolean,
  booleans,
  text,
  sym_int,  // syms[0]
  sym_ints,
  scalar_type,    // ints[0]: the export schema's dtype code
  memory_format,  // ints[0]: 0 unknown, 1 contiguous, 2 channels last, 3 channels last 3d, 4 preserve
  layout,         // ints[0]: kExportLayoutStrided
  device,         // text: the type ("cpu", "cuda"), ints[0]: the index or -1
};

// An integer argument: a constant, or (ref >= 0) the integer a node computed.
struct export_sym_int {
  int64_t value = 0;
  int32_t ref = -1;
};

struct export_arg {
  export_arg_type type = export_arg_type::none;
  std::vector<int32_t> refs;  // tensor, tensors, optional_tensors
  std::vector<int64_t> ints;  // integer(s), boolean(s) as 0/1, and the enums
  std::vector<double> reals;
  std::vector<export_sym_int> syms;
  std::string text;
};

struct export_input {
  std::string name;  // the operator's argument name
  export_arg arg;
};

// One of a node's outputs: a value, a list of values (an operator returning Tensor[]), or nothing.
struct export_output {
  std::vector<int32_t> values;
  bool list = false;
};

struct export_node {
  std::string name;    // for messages
  std::string target;  // "torch.ops.aten.add.Tensor", "_operator.mul"
  std::vector<export_input> inputs;
  std::vector<export_output> outputs;
};

enum class export_value_kind { tensor, sym_int };
struct export_value {
  std::string name;
  export_value_kind kind = export_value_kind::tensor;
};

enum class export_input_role { user_input, parameter, buffer, constant };
struct export_input_spec {
  export_input_role role = export_input_role::user_input;
  int32_t value = -1;  // the placeholder
  std::string target;  // the parameter's, buffer's or constant's name ("layer1.0.bn1.running_mean")
  bool persistent = true;
};

enum class export_output_role { user_output, buffer_mutation, user_input_mutation };
struct export_output_spec {
  export_output_role role = export_output_role::user_output;
  int32_t value = -1;  // -1: a user output that is None
  std::string target;  // the buffer mutated (a user input's placeholder name for user_input_mutation)
};

// A dimension of a declared type: a constant size or a symbol of the range constraints.
struct export_dim {
  int64_t size = 0;
  std::string symbol;  // empty for a constant
};

struct export_tensor_type {
  dtype type = dtype::float32;
  std::vector<export_dim> sizes;
};

struct export_range {
  int64_t min = 0;
  std::optional<int64_t> max;  // none: unbounded
};

struct export_program {
  std::string verifier;  // "ATEN" (core ATen after run_decompositions), "TRAINING" (torch.export.export's own)
  std::vector<export_value> values;
  std::vector<export_input_spec> inputs;  // in the graph's input order, one per placeholder
  std::vector<export_output_spec> outputs;
  std::vector<export_node> nodes;
  std::map<int32_t, export_tensor_type> input_types;  // every tensor placeholder's declared type
  std::map<std::string, export_range> ranges;         // the symbols' ranges
};

// A JSON document of the archive (model.json, the weights' configs): duplicate keys and nesting past
// kMaxExportJsonDepth refused, as input_error starting with `context`.
nlohmann::json read_export_json(std::string_view text, const std::string& context);

// Parses and validates model.json; `context` ("net.pt2: record 'net/models/model.json'") starts
// every message (input_error).
export_program parse_export_program(std::string_view json, const std::string& context);

// The target's operator: "torch.ops.aten.add.Tensor" -> {"aten::add", "Tensor"}, ".default" -> "";
// nullopt for a target that is not torch.ops.<namespace>.<name>.<overload>.
struct export_operator {
  std::string name;
  std::string overload;
};
std::optional<export_operator> export_operator_of(const std::string& target);

// "[s77, 3, 8, 8]" with symbols by name.
std::string export_type_text(const export_tensor_type& t);

}  // namespace swavg
