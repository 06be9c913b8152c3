// Where each entry of a fold's inputs ends (fold/entries.h), on state dicts built in memory: the
// non-tensor entries carried from the latest input holding them, in first-seen order, and tied
// tensors (one storage, one view, in every input) found only where their outputs must be equal.
#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fold/entries.h"
#include "fold/plan.h"
#include "fold/resume.h"
#include "fold/rules.h"
#include "formats/pickle/pickle.h"

using namespace swavg;

namespace {

// Keys for object entries: string keys, and an int key whose text reads the same.
struct keys {
  pickle_node text_key, int_key, value_a, value_b, value_c;
  keys() {
    text_key.kind = pickle_kind::string;
    int_key.kind = pickle_kind::integer;
  }
};

object_entry entry(const std::string& name, const pickle_node* key, const pickle_node* value) {
  object_entry e{name, "int", key, value, ""};
  e.string_key = key != nullptr && key->kind == pickle_kind::string;  // as torch_file sets it
  return e;
}

state_dict with_objects(const std::string& path, std::vector<object_entry> objects) {
  state_dict sd;
  sd.path = path;
  sd.objects = std::move(objects);
  return sd;
}

// A tensor as a view of a storage: its key, offset and strides decide whether two tensors are tied.
struct placed {
  std::string name;
  std::string storage_key;
  int64_t offset = 0;
  std::vector<int64_t> strides = {2, 1};
};

state_dict with_tensors(const std::string& path, const std::vector<placed>& tensors) {
  auto bytes = std::make_shared<std::vector<uint8_t>>(256, 0);
  state_dict sd;
  sd.path = path;
  for (const auto& t : tensors) {
    tensor_view v;
    v.shape = {2, 2};
    v.strides = t.strides;
    v.offset = t.offset;
    v.storage = bytes->data();
    v.storage_bytes = bytes->size();
    v.storage_key = t.storage_key;
    v.owner = bytes;
    sd.tensors.push_back(named_tensor{t.name, v, tensor_kind::parameter});
  }
  return sd;
}

tensor_rule rule(const char* pattern, tensor_action a) {
  return tensor_rule{pattern, compile_pattern(pattern, "test"), a, std::nullopt};
}

}  // namespace

TEST_CASE("entries: non-tensor entries come from the latest input holding them", "[entries][unit]") {
  keys k;
  const std::vector<state_dict> inputs = {
      with_objects("a.pt", {entry("epoch", &k.text_key, &k.value_a), entry("_extra_state", &k.text_key, &k.value_a)}),
      with_objects("b.pt", {entry("epoch", &k.text_key, &k.value_b)}),
      with_objects("c.pt", {}),
  };
  const state_dict resumed =
      with_objects("avg.pt", {entry("old", &k.text_key, &k.value_c), entry("epoch", &k.text_key, &k.value_c)});
  struct want {
    const char* name;
    const char* from;
    const pickle_node* value;
  };
  const auto check = [](const std::vector<carried_entry>& got, const std::vector<want>& wants) {
    REQUIRE(got.size() == wants.size());
    for (size_t i = 0; i < wants.size(); ++i) {
      INFO(wants[i].name);
      CHECK(got[i].entry.name == wants[i].name);
      CHECK(got[i].from == wants[i].from);
      CHECK(got[i].entry.value == wants[i].value);
    }
  };
  check(plan_carried(inputs, nullptr), {{"epoch", "b.pt", &k.value_b}, {"_extra_state", "a.pt", &k.value_a}});
  // The resumed average comes before every input: first in order, and the earliest source.
  check(plan_carried(inputs, &resumed),
        {{"old", "avg.pt", &k.value_c}, {"epoch", "b.pt", &k.value_b}, {"_extra_state", "a.pt", &k.value_a}});
  CHECK(plan_carried({with_objects("a.pt", {}), with_objects("b.pt", {})}, nullptr).empty());
}

TEST_CASE("entries: a string key and a non-string key of the same text are two entries", "[entries][unit]") {
  keys k;
  const std::vector<state_dict> inputs = {
      with_objects("a.pt", {entry("1", &k.text_key, &k.value_a), entry("1", &k.int_key, &k.value_b)}),
      with_objects("b.pt", {entry("1", &k.int_key, &k.value_c)}),
  };
  const std::vector<carried_entry> got = plan_carried(inputs, nullptr);
  REQUIRE(got.size() == 2);
  CHECK(got[0].entry.key == &k.text_key);
  CHECK(got[0].entry.value == &k.value_a);
  CHECK(got[1].entry.key == &k.int_key);
  CHECK(got[1].entry.value == &k.value_c);
  CHECK(got[1].from == "b.pt");
}

TEST_CASE("entries: tied tensors are found only where their outputs are equal", "[entries][unit]") {
  const placed emb{"emb.weight", "0"};
  struct tie_case {
    const char* what;
    std::vector<placed> a, b;  // the two inputs
    std::vector<tensor_rule> rules;
    std::vector<std::optional<size_t>> ties;
  };
  const std::vector<tie_case> cases = {
      {"the same view of one storage in every input",
       {emb, {"head.weight", "0"}},
       {emb, {"head.weight", "0"}},
       {},
       {std::nullopt, 0}},
      {"three names, one storage",
       {emb, {"head.weight", "0"}, {"out.weight", "0"}},
       {emb, {"head.weight", "0"}, {"out.weight", "0"}},
       {},
       {std::nullopt, 0, 0}},
      {"tied in one input only",
       {emb, {"head.weight", "0"}},
       {emb, {"head.weight", "1"}},
       {},
       {std::nullopt, std::nullopt}},
      {"another offset into the storage",
       {emb, {"head.weight", "0", 4}},
       {emb, {"head.weight", "0", 4}},
       {},
       {std::nullopt, std::nullopt}},
      {"another view (transposed)",
       {emb, {"head.weight", "0", 0, {1, 2}}},
       {emb, {"head.weight", "0", 0, {1, 2}}},
       {},
       {std::nullopt, std::nullopt}},
      {"no storage key: sharing unknown",
       {{"emb.weight", ""}, {"head.weight", ""}},
       {{"emb.weight", ""}, {"head.weight", ""}},
       {},
       {std::nullopt, std::nullopt}},
      {"folded another way (a rule)",
       {emb, {"head.weight", "0"}},
       {emb, {"head.weight", "0"}},
       {rule("^head\\.", tensor_action::first)},
       {std::nullopt, std::nullopt}},
      {"both folded the same way by a rule",
       {emb, {"head.weight", "0"}},
       {emb, {"head.weight", "0"}},
       {rule("weight$", tensor_action::first)},
       {std::nullopt, 0}},
      {"the earlier one dropped",
       {emb, {"head.weight", "0"}},
       {emb, {"head.weight", "0"}},
       {rule("^emb\\.", tensor_action::drop)},
       {std::nullopt, std::nullopt}},
      {"the later one dropped",
       {emb, {"head.weight", "0"}},
       {emb, {"head.weight", "0"}},
       {rule("^head\\.", tensor_action::drop)},
       {std::nullopt, std::nullopt}},
  };
  for (const auto& k : cases) {
    INFO(k.what);
    fold_config c;
    c.rules = k.rules;
    const std::vector<state_dict> inputs = {with_tensors("a.pt", k.a), with_tensors("b.pt", k.b)};
    const fold_plan plan = plan_fold(c, inputs, nullptr);
    CHECK(find_ties(plan) == k.ties);
  }
}

TEST_CASE("entries: a resumed average must hold the tie too", "[entries][unit]") {
  const placed emb{"emb.weight", "0"};
  const std::vector<state_dict> inputs = {with_tensors("a.pt", {emb, {"head.weight", "0"}}),
                                          with_tensors("b.pt", {emb, {"head.weight", "0"}})};
  for (const bool tied_there : {true, false}) {
    INFO(tied_there);
    state_dict earlier = with_tensors("avg.pt", {emb, {"head.weight", tied_there ? "0" : "1"}});
    earlier.metadata[kResumeKey] = R"({"version": 1, "mode": "swa", "n": 2})";
    const resumed_average resumed = open_resumed(std::move(earlier), fold_config{});
    const fold_plan plan = plan_fold(fold_config{}, inputs, &resumed);
    REQUIRE(plan.tensors[1].resumed != nullptr);
    const std::vector<std::optional<size_t>> want = {std::nullopt,
                                                     tied_there ? std::optional<size_t>(0) : std::nullopt};
    CHECK(find_ties(plan) == want);
  }
}
