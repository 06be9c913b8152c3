// Per-tensor rules and buffer names.
#include <catch2/catch.hpp>

#include "fold/rules.h"
#include "util/error.h"

using namespace swavg;

TEST_CASE("rules: first match wins, searched anywhere", "[rules]") {
  auto rules = parse_rules(R"([
    {"match": "^fc\\.", "action": "drop"},
    {"match": "bn", "action": "latest"},
    {"match": "embed", "action": "average", "decay": 0.99},
    {"match": ".*", "action": "first"}
  ])", "r.json");
  REQUIRE(rules.size() == 4);
  CHECK(match_rule(rules, "fc.weight")->action == tensor_action::drop);
  CHECK(match_rule(rules, "layer1.fc.weight")->action == tensor_action::first);
  CHECK(match_rule(rules, "layer1.bn1.weight")->action == tensor_action::latest);
  CHECK(match_rule(rules, "tok_embed.weight")->decay.value() == 0.99);
  CHECK(match_rule(rules, "conv.weight")->action == tensor_action::first);
  CHECK(match_rule({}, "conv.weight") == nullptr);
}

TEST_CASE("rules: bad files are usage errors that say what is wrong", "[rules]") {
  struct bad_case {
    const char* json;
    const char* message;
  };
  const bad_case cases[] = {
      {"{", "not valid JSON"},
      {R"({"match": "x"})", "expected a JSON list"},
      {R"([{"action": "drop"}])", "\"match\" must be a string"},
      {R"([{"match": "x", "action": "smash"}])", "action must be average, latest, first or drop"},
      {R"([{"match": "(", "action": "drop"}])", "invalid regular expression"},
      {R"([{"match": "x", "action": "average", "decay": 2}])", "decay must be in [0, 1]"},
      {R"([{"match": "x", "action": "average", "decya": 0.5}])", "unknown field 'decya'"},
      {R"([3])", "expected an object"},
  };
  for (const auto& c : cases) {
    INFO(c.json);
    CHECK_THROWS_WITH(parse_rules(c.json, "rules.json"), Catch::Contains(c.message) && Catch::Contains("rules.json"));
    CHECK_THROWS_AS(parse_rules(c.json, "rules.json"), usage_error);
  }
}

TEST_CASE("standard buffer names", "[rules]") {
  CHECK(is_standard_buffer_name("layer1.0.bn1.running_mean"));
  CHECK(is_standard_buffer_name("bn.running_var"));
  CHECK(is_standard_buffer_name("num_batches_tracked"));
  CHECK_FALSE(is_standard_buffer_name("bn.weight"));
  CHECK_FALSE(is_standard_buffer_name("running_mean_proj.weight"));
}

TEST_CASE("the shipped example rules parse and do what they say", "[rules]") {
  auto rules = load_rules(std::string(SWAVG_SOURCE_DIR) + "/configs/rules.example.json");
  REQUIRE(rules.size() == 4);
  CHECK(match_rule(rules, "bn1.num_batches_tracked")->action == tensor_action::latest);
  CHECK(match_rule(rules, "head.weight")->action == tensor_action::latest);
  CHECK(match_rule(rules, "module.head.bias")->action == tensor_action::latest);
  CHECK(match_rule(rules, "vit.pos_embed")->decay.value() == 0.9999);
  CHECK(match_rule(rules, "aux_classifier.0.weight")->action == tensor_action::drop);
  CHECK(match_rule(rules, "blocks.0.attn.qkv.weight") == nullptr);
}
