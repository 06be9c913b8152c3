// Which checkpoints are folded, in which order: sorting and thinning.
#include <catch2/catch.hpp>

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
