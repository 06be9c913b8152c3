// Per-tensor rules and buffer names.
#include <catch2/catch.hpp>
#include <ctime>
#include <iterator>
#include <string>

#include "fold/rules.h"
#include "util/error.h"

using namespace swavg;

TEST_CASE("rules: first match wins, searched anywhere", "[rules]") {
  auto rules = parse_rules(R"([
    {"match": "^fc\\.", "action": "drop"},
    {"match": "bn", "action": "latest"},
    {"match": "embed", "action": "average", "decay": 0.99},
    {"match": ".*", "action": "first"}
  ])",
                           "r.json");
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

TEST_CASE("rules: RE2 syntax, searched, linear in the name", "[rules]") {
  // A 1 MB name against patterns a backtracking engine (std::regex) recurses or explodes on.
  const std::string name = std::string(1 << 20, 'a') + ".weight";
  const std::string patterns[] = {"(a|b)*\\.weight$", "^(a|aa)*$", "(a*)*b", "(?:a|b)*c", "(a+)+$"};
  const bool want[] = {true, false, false, false, false};
  const std::clock_t start = std::clock();  // CPU time: a busy machine does not fail the test
  for (size_t i = 0; i < std::size(patterns); ++i) {
    INFO(patterns[i]);
    CHECK(compile_pattern(patterns[i], "--buffer").search(name) == want[i]);
  }
  const double seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  CHECK(seconds < 2.0);  // 0.02 s on the project's machine; std::regex overflows its stack on the first

  // Unanchored search, as before: anchors are the user's.
  CHECK(compile_pattern("bn", "t").search("layer1.bn1.weight"));
  CHECK_FALSE(compile_pattern("^bn", "t").search("layer1.bn1.weight"));
  CHECK(compile_pattern("\\d+\\.bn\\d", "t").search("layer1.0.bn1.weight"));
  // Names are bytes: a non-UTF-8 name does not stop the search.
  CHECK(compile_pattern("weight$", "t").search(std::string("\xff\xfe.weight")));
}

TEST_CASE("rules: patterns RE2 rejects are usage errors naming the option", "[rules]") {
  const char* bad[] = {"(", "a{2,1}", "(?=x)", "(?<=x)y", "(a)\\1", "[z-a]"};
  for (const char* p : bad) {
    INFO(p);
    CHECK_THROWS_AS(compile_pattern(p, "--buffer"), usage_error);
    CHECK_THROWS_WITH(compile_pattern(p, "--buffer"),
                      Catch::StartsWith("--buffer: invalid regular expression") && Catch::Contains("RE2 syntax"));
  }
  // In a rules file, the message names the file and the rule.
  const char* rules = R"j([{"match": "x", "action": "first"}, {"match": "(?!x)", "action": "drop"}])j";
  CHECK_THROWS_WITH(parse_rules(rules, "r.json"),
                    Catch::StartsWith("r.json: rule 2: invalid regular expression '(?!x)'"));
}
