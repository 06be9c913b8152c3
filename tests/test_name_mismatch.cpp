// Why two checkpoints' names disagree: a prefix (and the exact --strip-prefix), different models,
// a partial overlap; each verdict at the edge of the next.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "fold/name_mismatch.h"

using namespace swavg;

namespace {

std::vector<named_shape> model(const std::string& prefix, int n, int64_t width = 4) {
  std::vector<named_shape> names;
  for (int i = 0; i < n; ++i) names.push_back({prefix + "layers." + std::to_string(i) + ".weight", {width, 4}});
  return names;
}

}  // namespace

TEST_CASE("name sets: the same names are the same", "[name_mismatch]") {
  const auto d = diagnose_name_sets(model("", 5), model("", 5));
  CHECK(d.verdict == name_set_verdict::same);
  CHECK(d.common == 5);
  CHECK(name_set_advice(d, "a.pt", "b.pt", false).empty());
}

TEST_CASE("name sets: a prefix on one side gives the exact --strip-prefix", "[name_mismatch]") {
  auto d = diagnose_name_sets(model("model.", 17), model("", 17));
  REQUIRE(d.verdict == name_set_verdict::prefix);
  CHECK(d.prefix_a == "model.");
  CHECK(d.prefix_b.empty());
  CHECK(name_set_advice(d, "a.pt", "b.safetensors", false) ==
        "the tensor names of a.pt are those of b.safetensors with the prefix 'model.': pass --strip-prefix model.");
  // The other way round, and a deeper prefix.
  d = diagnose_name_sets(model("", 3), model("module.model.", 3));
  REQUIRE(d.verdict == name_set_verdict::prefix);
  CHECK(d.prefix_b == "module.model.");
  CHECK(name_set_advice(d, "a.pt", "b.pt", false).find("pass --strip-prefix module.model.") != std::string::npos);
  // Names in common besides the prefixed ones (a tied buffer saved at the top level).
  auto a = model("_orig_mod.", 4), b = model("", 4);
  a.push_back({"step", {}});
  b.push_back({"step", {}});
  d = diagnose_name_sets(a, b);
  CHECK(d.verdict == name_set_verdict::prefix);
  CHECK(d.prefix_a == "_orig_mod.");
}

TEST_CASE("name sets: a prefix on each side gives both, quoted for the shell where needed", "[name_mismatch]") {
  auto d = diagnose_name_sets(model("module.", 3), model("model.", 3));
  REQUIRE(d.verdict == name_set_verdict::prefix);
  CHECK(name_set_advice(d, "a.pt", "b.pt", false).find("pass --strip-prefix module. --strip-prefix model.") !=
        std::string::npos);
  d = diagnose_name_sets(model("my net.", 2), model("", 2));
  REQUIRE(d.verdict == name_set_verdict::prefix);
  CHECK(name_set_advice(d, "a.pt", "b.pt", false).find("--strip-prefix 'my net.'") != std::string::npos);
}

TEST_CASE("name sets: not a prefix when one name does not follow it", "[name_mismatch]") {
  auto a = model("model.", 3), b = model("", 3);
  a.push_back({"model.extra", {1}});  // no 'extra' in b
  const auto d = diagnose_name_sets(a, b);
  CHECK(d.verdict == name_set_verdict::different_models);  // nothing in common
  // Stripping would also strip a name of b that keeps the prefix: no advice to strip it.
  auto c = model("model.", 2), e = model("", 2);
  e.push_back({"model.layers.0.weight.x", {1}});
  CHECK(diagnose_name_sets(c, e).verdict != name_set_verdict::prefix);
}

TEST_CASE("name sets: different models when under half the names are shared", "[name_mismatch]") {
  // 10 names against 10: 5 in common is half (partial), 4 is under half (different).
  auto a = model("", 10);
  auto b = model("", 5);
  for (int i = 0; i < 5; ++i) b.push_back({"other." + std::to_string(i), {4}});
  CHECK(diagnose_name_sets(a, b).verdict == name_set_verdict::partial_overlap);
  b = model("", 4);
  for (int i = 0; i < 6; ++i) b.push_back({"other." + std::to_string(i), {4}});
  auto d = diagnose_name_sets(a, b);
  CHECK(d.verdict == name_set_verdict::different_models);
  CHECK(name_set_advice(d, "a.pt", "b.pt", false) ==
        "a.pt and b.pt look like different models (4 of their tensor names in common): check the inputs; no option "
        "makes them one model");
  // Disjoint names.
  CHECK(diagnose_name_sets(model("", 3), {{"x", {1}}, {"y", {2}}}).verdict == name_set_verdict::different_models);
}

TEST_CASE("name sets: the same names, most of other shapes, are different models, a few are not", "[name_mismatch]") {
  // 4 names: 2 of other shapes is half (shapes_differ), 3 is most (different models).
  auto a = model("", 4), b = model("", 4);
  b[0].shape = {8, 4};
  b[1].shape = {8, 4};
  auto d = diagnose_name_sets(a, b);
  CHECK(d.verdict == name_set_verdict::shapes_differ);
  CHECK(name_set_advice(d, "a.pt", "b.pt", false).empty());  // never --allow-missing for a shape
  b[2].shape = {8, 4};
  d = diagnose_name_sets(a, b);
  CHECK(d.verdict == name_set_verdict::different_models);
  CHECK(name_set_advice(d, "a.pt", "b.pt", false).find("3 of them with other shapes") != std::string::npos);
}

TEST_CASE("name sets: --allow-missing is suggested for a partial overlap only, and not when given", "[name_mismatch]") {
  auto a = model("", 10), b = model("", 9);
  const auto d = diagnose_name_sets(a, b);
  REQUIRE(d.verdict == name_set_verdict::partial_overlap);
  CHECK(name_set_advice(d, "a.pt", "b.pt", false) ==
        "b.pt lacks 1 of the tensors of a.pt: pass --allow-missing to average each tensor over the checkpoints that "
        "have it");
  auto c = model("", 9);
  c.push_back({"x", {1}});
  CHECK(name_set_advice(diagnose_name_sets(a, c), "a.pt", "c.pt", false)
            .rfind("c.pt lacks 1 of the tensors of a.pt, and a.pt lacks 1 of those of c.pt: pass", 0) == 0);
  CHECK(name_set_advice(d, "a.pt", "b.pt", true).empty());
}

TEST_CASE("name sets: a name that is its prefix twice over still maps, as --strip-prefix strips it once",
          "[name_mismatch]") {
  // --strip-prefix strips a name only when it is longer than the prefix, once: 'm.m.' becomes 'm.',
  // which keeps its 'm.'. The diagnosis follows the same rule (a rest equal to the prefix is no
  // prefix left on it) and finds the prefix.
  auto a = model("m.", 3), b = model("", 3);
  a.push_back({"m.m.", {1}});
  b.push_back({"m.", {1}});
  const auto d = diagnose_name_sets(a, b);
  CHECK(d.verdict == name_set_verdict::prefix);
  CHECK(d.prefix_a == "m.");
  CHECK(d.prefix_b.empty());
}

TEST_CASE("name sets: not a prefix when a name would keep it after one strip, as the other side's name loses it",
          "[name_mismatch]") {
  // 'model.model.x' less 'model.' is 'model.x', the name in b; but --strip-prefix model. strips b's
  // 'model.x' too (to 'x'): no advice to strip it.
  auto a = model("model.", 3), b = model("", 3);
  a.push_back({"model.model.x", {1}});
  b.push_back({"model.x", {1}});
  CHECK(diagnose_name_sets(a, b).verdict != name_set_verdict::prefix);
  // The same with a prefix on each side: b's rest would keep b's prefix.
  auto c = model("module.", 3), e = model("model.", 3);
  c.push_back({"module.model.x", {1}});
  e.push_back({"model.model.x", {1}});
  CHECK(diagnose_name_sets(c, e).verdict != name_set_verdict::prefix);
}

TEST_CASE("name sets: a prefix of 8 parts is found, one of 9 is past the cuts tried", "[name_mismatch]") {
  auto d = diagnose_name_sets(model("a.b.c.d.e.f.g.h.", 3), model("", 3));
  CHECK(d.verdict == name_set_verdict::prefix);
  CHECK(d.prefix_a == "a.b.c.d.e.f.g.h.");
  d = diagnose_name_sets(model("", 3), model("a/b/c/d/e/f/g/h/", 3));
  CHECK(d.verdict == name_set_verdict::prefix);
  CHECK(d.prefix_b == "a/b/c/d/e/f/g/h/");
  CHECK(diagnose_name_sets(model("a.b.c.d.e.f.g.h.i.", 3), model("", 3)).verdict != name_set_verdict::prefix);
}
