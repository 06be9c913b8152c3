// Which checkpoints are folded, in which order: sorting and thinning.
#include <catch2/catch.hpp>
#include <climits>

#include "cli/input_list.h"
#include "util/error.h"

using namespace swavg;

TEST_CASE("natural order puts ckpt_2 before ckpt_10", "[input_list]") {
  input_selection s;
  s.paths = {"ckpt_10.pt", "ckpt_2.pt", "ckpt_1.pt", "ckpt_02b.pt", "a.pt"};
  s.sort = sort_order::natural;
  CHECK(select_inputs(s) == std::vector<std::string>{"a.pt", "ckpt_1.pt", "ckpt_2.pt", "ckpt_02b.pt", "ckpt_10.pt"});
  s.sort = sort_order::name;
  CHECK(select_inputs(s) == std::vector<std::string>{"a.pt", "ckpt_02b.pt", "ckpt_1.pt", "ckpt_10.pt", "ckpt_2.pt"});
}

TEST_CASE("thinning with every and last", "[input_list]") {
  input_selection s;
  for (int i = 1; i <= 7; ++i) s.paths.push_back("c" + std::to_string(i));
  s.every = 2;
  CHECK(select_inputs(s) == std::vector<std::string>{"c2", "c4", "c6"});
  s.last = 2;
  CHECK(select_inputs(s) == std::vector<std::string>{"c4", "c6"});
  s.every = 0;
  CHECK_THROWS_AS(select_inputs(s), usage_error);
  input_selection empty;
  CHECK_THROWS_WITH(select_inputs(empty), Catch::Contains("no input"));
}

TEST_CASE("every and last at their edges", "[input_list]") {
  struct edge {
    int every;
    int last;
    std::vector<std::string> want;  // empty: an error naming the option
    const char* error;
  };
  const std::vector<edge> edges = {
      {1, 0, {"c1", "c2", "c3"}, nullptr},  // last 0: the field's default, all (the option takes N >= 1)
      {1, 1, {"c3"}, nullptr},
      {INT_MAX, 0, {}, "no input"},  // fine, but keeps nothing of 3
      {3, 0, {"c3"}, nullptr},
      {1, INT_MAX, {"c1", "c2", "c3"}, nullptr},
      {0, 0, {}, "--every: expected an integer in [1, 2147483647], got 0"},
      {-1, 0, {}, "--every: expected an integer in [1, 2147483647], got -1"},
      {1, -1, {}, "--last: expected an integer in [1, 2147483647], got -1"},
      {1, INT_MIN, {}, "--last"},
  };
  for (const auto& e : edges) {
    INFO("every " << e.every << ", last " << e.last);
    input_selection s;
    s.paths = {"c1", "c2", "c3"};
    s.every = e.every;
    s.last = e.last;
    if (e.error)
      CHECK_THROWS_WITH(select_inputs(s), Catch::Contains(e.error));
    else
      CHECK(select_inputs(s) == e.want);
  }
}
