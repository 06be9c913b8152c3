// Names as PyTorch changes them: --strip-prefix once per prefix from every entry, --exclude.
#include <catch2/catch.hpp>

#include "tensor/state_dict.h"
#include "util/error.h"

using namespace swavg;

namespace {

state_dict entries(const std::vector<std::string>& tensors, const std::vector<std::string>& objects) {
  state_dict sd;
  sd.path = "in.pt";
  for (const auto& n : tensors) sd.tensors.push_back(named_tensor{n, tensor_view{}, tensor_kind::unknown});
  for (const auto& n : objects) {
    sd.objects.push_back(object_entry{n, "dict", nullptr, nullptr, "in.pt"});
    sd.others.push_back(other_entry{n, "dict", ""});
  }
  return sd;
}

std::vector<std::string> tensor_names(const state_dict& sd) {
  std::vector<std::string> out;
  for (const auto& t : sd.tensors) out.push_back(t.name);
  return out;
}

}  // namespace

TEST_CASE("a prefix is stripped once, from tensors and entries alike", "[state_dict]") {
  state_dict sd = entries({"model.model.embed.weight", "model.head.bias", "other.w"}, {"model.a._extra_state"});
  strip_prefixes(sd, {"model."});
  CHECK(tensor_names(sd) == std::vector<std::string>{"model.embed.weight", "head.bias", "other.w"});
  CHECK(sd.objects[0].name == "a._extra_state");
  CHECK(sd.objects[0].renamed);
  CHECK(sd.others[0].path == "a._extra_state");
  // Each prefix once, in the order given: two calls of consume_prefix_in_state_dict_if_present.
  state_dict twice = entries({"_orig_mod.module.w", "module._orig_mod.v"}, {});
  strip_prefixes(twice, {"_orig_mod.", "module."});
  CHECK(tensor_names(twice) == std::vector<std::string>{"w", "_orig_mod.v"});
}

TEST_CASE("a name equal to the prefix keeps it, a collision is refused", "[state_dict]") {
  state_dict sd = entries({"module.", "module.w"}, {});
  strip_prefixes(sd, {"module."});
  CHECK(tensor_names(sd) == std::vector<std::string>{"module.", "w"});
  state_dict clash = entries({"module.w", "w"}, {});
  CHECK_THROWS_AS(strip_prefixes(clash, {"module."}), input_error);
  state_dict entry_clash = entries({"module.x"}, {"x"});
  CHECK_THROWS_AS(strip_prefixes(entry_clash, {"module."}), input_error);
}

TEST_CASE("a non-string key is not renamed", "[state_dict]") {
  state_dict sd = entries({"module.w"}, {"7"});
  sd.objects[0].string_key = false;
  strip_prefixes(sd, {"7"});
  CHECK(sd.objects[0].name == "7");
  CHECK_FALSE(sd.objects[0].renamed);
  rename_entry(sd.objects[0], "module.7");
  CHECK(sd.objects[0].name == "7");
}

TEST_CASE("exclude_entries leaves out an entry and everything under it, and names a miss", "[state_dict]") {
  state_dict sd = entries({"tok.weight", "optimizer.state.0.exp_avg", "optimizer_x.w", "train_state"},
                          {"optimizer.param_groups", "lr"});
  exclude_entries(sd, {"optimizer", "train_state"});
  CHECK(tensor_names(sd) == std::vector<std::string>{"tok.weight", "optimizer_x.w"});
  REQUIRE(sd.objects.size() == 1);
  CHECK(sd.objects[0].name == "lr");
  REQUIRE(sd.others.size() == 1);
  state_dict miss = entries({"tok.weight"}, {});
  try {
    exclude_entries(miss, {"optimiser"});
    FAIL("no error");
  } catch (const usage_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("--exclude optimiser") && Catch::Contains("in.pt") &&
                             Catch::Contains("swavg inspect in.pt"));
  }
  state_dict none = entries({"a.w"}, {});
  exclude_entries(none, {});
  CHECK(tensor_names(none) == std::vector<std::string>{"a.w"});
}
