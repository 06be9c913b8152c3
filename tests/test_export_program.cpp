// torch.export's model.json as formats/export reads it: a program built here in the layout
// torch.export.save writes (schema 8), then altered one field at a time: each refusal names what is
// wrong, every bound at its edge. The BatchNorm owners of export_batchnorm.h on the same programs.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "formats/export/export_batchnorm.h"
#include "formats/export/export_program.h"
#include "support.h"

using namespace swavg;
using swavg::test::error_of;
using json = nlohmann::json;

namespace {

json tensor_arg(const std::string& name) { return {{"as_tensor", {{"name", name}}}}; }
json input(const std::string& name, json arg) { return {{"name", name}, {"arg", std::move(arg)}, {"kind", 1}}; }
json meta(std::vector<json> sizes) {
  return {{"dtype", 7},
          {"sizes", sizes},
          {"strides", json::array()},
          {"storage_offset", {{"as_int", 0}}},
          {"layout", 7},
          {"requires_grad", false},
          {"device", {{"type", "cpu"}, {"index", nullptr}}}};
}
json size(int64_t n) { return {{"as_int", n}}; }
json symbol(const std::string& s) {
  return {{"as_expr", {{"expr_str", "Symbol('" + s + "', positive=True, integer=True)"}, {"hint", {{"as_int", 4}}}}}};
}

// x [s0, 4] -> batch norm over module "bn" (called `calls` times, chained) -> relu.
json bn_program(int calls = 1) {
  json nodes = json::array();
  std::string mean = "b_bn_running_mean", var = "b_bn_running_var", x = "x", count = "b_bn_num_batches_tracked";
  for (int i = 0; i < calls; ++i) {
    const std::string k = std::to_string(i);
    nodes.push_back({{"target", "torch.ops.aten.add.Tensor"},
                     {"inputs", {input("self", tensor_arg(count)), input("other", {{"as_int", 1}})}},
                     {"outputs", {tensor_arg("add_" + k)}},
                     {"name", "add_" + k}});
    count = "add_" + k;
    nodes.push_back({{"target", kExportBatchNormTarget},
                     {"inputs",
                      {input("input", tensor_arg(x)), input("weight", tensor_arg("p_bn_weight")),
                       input("bias", tensor_arg("p_bn_bias")), input("running_mean", tensor_arg(mean)),
                       input("running_var", tensor_arg(var)), input("training", {{"as_bool", true}}),
                       input("momentum", {{"as_float", 0.1}}), input("eps", {{"as_float", 1e-5}})}},
                     {"outputs",
                      {tensor_arg("bn_" + k), tensor_arg("save_mean_" + k), tensor_arg("save_rstd_" + k),
                       tensor_arg("mean_" + k), tensor_arg("var_" + k)}},
                     {"name", "bn_" + k}});
    mean = "mean_" + k, var = "var_" + k, x = "bn_" + k;
  }
  nodes.push_back({{"target", "torch.ops.aten.relu.default"},
                   {"inputs", {input("self", tensor_arg(x))}},
                   {"outputs", {tensor_arg("relu")}},
                   {"name", "relu"}});
  const auto param = [](const std::string& arg, const std::string& fqn) {
    return json{{"parameter", {{"arg", {{"name", arg}}}, {"parameter_name", fqn}}}};
  };
  const auto buffer = [](const std::string& arg, const std::string& fqn) {
    return json{{"buffer", {{"arg", {{"name", arg}}}, {"buffer_name", fqn}, {"persistent", true}}}};
  };
  const auto mutation = [](const std::string& arg, const std::string& fqn) {
    return json{{"buffer_mutation", {{"arg", {{"name", arg}}}, {"buffer_name", fqn}}}};
  };
  const std::string last = std::to_string(calls - 1);
  json specs = {param("p_bn_weight", "bn.weight"),
                param("p_bn_bias", "bn.bias"),
                buffer("b_bn_running_mean", "bn.running_mean"),
                buffer("b_bn_running_var", "bn.running_var"),
                buffer("b_bn_num_batches_tracked", "bn.num_batches_tracked"),
                {{"user_input", {{"arg", tensor_arg("x")}}}}};
  json outputs = {mutation("mean_" + last, "bn.running_mean"),
                  mutation("var_" + last, "bn.running_var"),
                  mutation("add_" + last, "bn.num_batches_tracked"),
                  {{"user_output", {{"arg", tensor_arg("relu")}}}}};
  json graph_inputs = json::array(), graph_outputs = json::array();
  for (const char* n :
       {"p_bn_weight", "p_bn_bias", "b_bn_running_mean", "b_bn_running_var", "b_bn_num_batches_tracked", "x"})
    graph_inputs.push_back(tensor_arg(n));
  for (const std::string& n : {"mean_" + last, "var_" + last, "add_" + last, std::string("relu")})
    graph_outputs.push_back(tensor_arg(n));
  json values = {{"x", meta({symbol("s0"), size(4)})},  {"p_bn_weight", meta({size(4)})},
                 {"p_bn_bias", meta({size(4)})},        {"b_bn_running_mean", meta({size(4)})},
                 {"b_bn_running_var", meta({size(4)})}, {"b_bn_num_batches_tracked", meta({})}};
  values["b_bn_num_batches_tracked"]["dtype"] = 5;
  return {
      {"graph_module",
       {{"graph", {{"inputs", graph_inputs}, {"outputs", graph_outputs}, {"nodes", nodes}, {"tensor_values", values}}},
        {"signature", {{"input_specs", specs}, {"output_specs", outputs}}}}},
      {"range_constraints", {{"s0", {{"min_val", 2}, {"max_val", nullptr}}}}},
      {"schema_version", {{"major", 8}, {"minor", 20}}},
      {"verifiers", {"ATEN"}}};
}

export_program parse(const json& j) { return parse_export_program(j.dump(), "net.pt2"); }
std::string refusal(const json& j) {
  return error_of([&] { parse(j); });
}
std::string bn_refusal(const json& j) {
  return error_of([&] { find_export_batchnorms(parse(j), "net.pt2"); });
}

}  // namespace

TEST_CASE("export program: the signature, the nodes and the declared input", "[export_program][unit]") {
  const export_program p = parse(bn_program());
  CHECK(p.verifier == "ATEN");
  REQUIRE(p.inputs.size() == 6);
  CHECK(p.inputs[0].role == export_input_role::parameter);
  CHECK(p.inputs[0].target == "bn.weight");
  CHECK(p.inputs[5].role == export_input_role::user_input);
  CHECK(export_type_text(p.input_types.at(p.inputs[5].value)) == "[s0, 4]");
  CHECK(p.ranges.at("s0").min == 2);
  CHECK_FALSE(p.ranges.at("s0").max);
  REQUIRE(p.nodes.size() == 3);
  CHECK(p.nodes[1].outputs.size() == 5);
  CHECK(p.nodes[0].inputs[1].arg.type == export_arg_type::integer);
  CHECK(p.outputs[2].role == export_output_role::buffer_mutation);
  CHECK(p.outputs[2].target == "bn.num_batches_tracked");
}

TEST_CASE("export program: a graph that reads outside what it defines is refused", "[export_program][unit]") {
  json j = bn_program();
  j["graph_module"]["graph"]["nodes"][2]["inputs"][0] = input("self", tensor_arg("nowhere"));
  CHECK_THAT(refusal(j), Catch::Contains("reads 'nowhere', which no earlier node or input defines"));
  // A value read before the node that defines it.
  j = bn_program();
  j["graph_module"]["graph"]["nodes"][0]["inputs"][0] = input("self", tensor_arg("relu"));
  CHECK_THAT(refusal(j), Catch::Contains("reads 'relu', which no earlier node or input defines"));
  j = bn_program();
  j["graph_module"]["graph"]["nodes"][2]["outputs"][0] = tensor_arg("x");
  CHECK_THAT(refusal(j), Catch::Contains("defines 'x', which is defined before"));
  j = bn_program();
  j["graph_module"]["signature"]["output_specs"][0]["buffer_mutation"]["buffer_name"] = "bn.weight";
  CHECK_THAT(refusal(j), Catch::Contains("mutates 'bn.weight', which is no buffer"));
  j = bn_program();
  j["graph_module"]["graph"]["inputs"][0] = tensor_arg("p_bn_bias");
  CHECK_THAT(refusal(j), Catch::Contains("graph input 0 is not 'p_bn_weight'"));
}

TEST_CASE("export program: kinds swavg does not bind or pass are refused by name", "[export_program][unit]") {
  json j = bn_program();
  j["graph_module"]["graph"]["nodes"][2]["inputs"][0] = input("self", {{"as_graph", {{"name", "g"}}}});
  CHECK_THAT(refusal(j), Catch::Contains("an argument of kind 'as_graph', which swavg does not pass"));
  j = bn_program();
  j["graph_module"]["signature"]["input_specs"][5] = {{"custom_obj", {{"arg", {{"name", "x"}}}}}};
  CHECK_THAT(refusal(j), Catch::Contains("of kind 'custom_obj', which swavg does not bind"));
  j = bn_program();
  j["schema_version"]["major"] = 7;
  CHECK_THAT(refusal(j), Catch::Contains("export schema version 7, swavg reads schema 8"));
  j["schema_version"]["major"] = 8;
  CHECK_NOTHROW(parse(j));
  j = bn_program();
  j["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0] = {
      {"as_expr", {{"expr_str", "Mul(Integer(2), Symbol('s0'))"}}}};
  CHECK_THAT(refusal(j), Catch::Contains("a size of 'Mul(Integer(2), Symbol('s0'))', not a constant or a symbol"));
  j = bn_program();
  j["range_constraints"]["s0"] = {{"min_val", 5}, {"max_val", 4}};
  CHECK_THAT(refusal(j), Catch::Contains("the range of 's0' is empty: 5..4"));
  j["range_constraints"]["s0"] = {{"min_val", 4}, {"max_val", 4}};
  CHECK_NOTHROW(parse(j));
}

TEST_CASE("export program: nesting is bounded at its edge", "[export_program][unit]") {
  // The program nests 7 deep where "extra" sits (top, graph_module, graph, nodes, node, metadata);
  // what "extra" holds adds to that.
  const auto with_depth = [](int depth) {
    json j = bn_program();
    json nested = json::array();
    for (int i = 1; i < depth; ++i) nested = json::array({nested});
    j["extra"] = nested;  // top object (1) + `depth` arrays
    return j;
  };
  CHECK_NOTHROW(parse(with_depth(kMaxExportJsonDepth - 1)));
  CHECK_THAT(refusal(with_depth(kMaxExportJsonDepth)),
             Catch::Contains("JSON nests deeper than " + std::to_string(kMaxExportJsonDepth) + " levels"));
}

TEST_CASE("export program: operator targets", "[export_program][unit]") {
  const auto add = export_operator_of("torch.ops.aten.add.Tensor");
  REQUIRE(add);
  CHECK(add->name == "aten::add");
  CHECK(add->overload == "Tensor");
  CHECK(export_operator_of("torch.ops.aten.relu.default")->overload.empty());
  CHECK_FALSE(export_operator_of("_operator.mul"));
  CHECK_FALSE(export_operator_of("torch.ops.aten.relu"));
  CHECK_FALSE(export_operator_of("torch.ops.aten.relu.default.x"));
  CHECK_FALSE(export_operator_of("torch.ops..relu.default"));
  CHECK(export_dtype(7) == dtype::float32);
  CHECK(export_dtype(5) == dtype::int64);
  CHECK_FALSE(export_dtype(0));
}

TEST_CASE("export batchnorm: calls owned by the module whose buffers they chain", "[export_program][unit]") {
  const std::vector<export_batchnorm> once = find_export_batchnorms(parse(bn_program(1)), "net.pt2");
  REQUIRE(once.size() == 1);
  CHECK(once[0].module == "bn");
  CHECK(once[0].nodes == std::vector<size_t>{1});
  CHECK(once[0].num_batches_tracked == "bn.num_batches_tracked");
  CHECK(once[0].features == 4);
  CHECK(once[0].momentum == 0.1);
  const std::vector<export_batchnorm> twice = find_export_batchnorms(parse(bn_program(2)), "net.pt2");
  REQUIRE(twice.size() == 1);
  CHECK(twice[0].nodes == std::vector<size_t>{1, 3});
}

TEST_CASE("export batchnorm: refusals", "[export_program][unit]") {
  json j = bn_program();
  j["graph_module"]["graph"]["nodes"][1]["target"] = "torch.ops.aten._native_batch_norm_legit_no_training.default";
  CHECK_THAT(bn_refusal(j), Catch::Contains("export the model in train mode"));
  j = bn_program();
  j["graph_module"]["graph"]["nodes"][1]["inputs"][3] = input("running_mean", tensor_arg("x"));
  CHECK_THAT(bn_refusal(j), Catch::Contains("its running_mean 'x' is neither a buffer"));
  j = bn_program();
  j["graph_module"]["graph"]["nodes"][1]["inputs"][5] = input("training", {{"as_bool", false}});
  CHECK_THAT(bn_refusal(j), Catch::Contains("not called in training mode"));
  // The second call's statistics are what the buffers get, not the first's.
  j = bn_program(2);
  j["graph_module"]["signature"]["output_specs"][0]["buffer_mutation"]["arg"]["name"] = "mean_0";
  j["graph_module"]["graph"]["outputs"][0] = tensor_arg("mean_0");
  CHECK_THAT(bn_refusal(j), Catch::Contains("does not write its new statistics to 'bn.running_mean'"));
  // Buffers no call reads: reset, as update_bn leaves an unreached module.
  j = bn_program();
  j["graph_module"]["graph"]["nodes"].erase(1);
  j["graph_module"]["graph"]["nodes"][1]["inputs"][0] = input("self", tensor_arg("x"));
  j["graph_module"]["graph"]["nodes"][0]["outputs"][0] = tensor_arg("add_0");
  for (int i = 0; i < 2; ++i) {
    j["graph_module"]["signature"]["output_specs"].erase(0);
    j["graph_module"]["graph"]["outputs"].erase(0);
  }
  const std::vector<export_batchnorm> none = find_export_batchnorms(parse(j), "net.pt2");
  REQUIRE(none.size() == 1);
  CHECK_FALSE(none[0].reached);
}
