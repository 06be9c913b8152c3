// Choosing among the gathered checkpoints (fold/selection.h): step ranges, --every, --last and a
// metric's top or bottom N, in that order, with Python's tie rule, and each refusal at its edge.
#include <catch2/catch.hpp>

#include <climits>
#include <fstream>

#include "fold/selection.h"
#include "support.h"
#include "util/error.h"

using namespace swavg;

namespace {

std::vector<std::string> names(int n, const std::string& prefix = "c") {
  std::vector<std::string> out;
  for (int i = 1; i <= n; ++i) out.push_back(prefix + std::to_string(i));
  return out;
}

}  // namespace

TEST_CASE("thinning with every and last", "[selection]") {
  selection_config c;
  c.every = 2;
  CHECK(select_checkpoints(names(7), c).kept() == std::vector<std::string>{"c2", "c4", "c6"});
  c.last = 2;
  const checkpoint_selection s = select_checkpoints(names(7), c);
  CHECK(s.kept() == std::vector<std::string>{"c4", "c6"});
  CHECK(s.candidates[1].dropped_by == "--last");
  CHECK(s.candidates[0].dropped_by == "--every");
  CHECK(s.chooses());
  CHECK_FALSE(select_checkpoints(names(3), selection_config{}).chooses());
}

TEST_CASE("every and last at their edges", "[selection]") {
  struct edge {
    int every;
    int last;
    std::vector<std::string> want;  // empty: an error naming the option
    const char* error;
  };
  const std::vector<edge> edges = {
      {1, 0, {"c1", "c2", "c3"}, nullptr},  // last 0: the field's default, all (the option takes N >= 1)
      {1, 1, {"c3"}, nullptr},
      {INT_MAX, 0, {}, "--every 2147483647 keeps none of the 3 inputs given; choose K from 1 to 3"},
      {4, 0, {}, "--every 4 keeps none of the 3 inputs given"},
      {3, 0, {"c3"}, nullptr},
      {1, INT_MAX, {"c1", "c2", "c3"}, nullptr},
      {0, 0, {}, "--every: expected an integer in [1, 2147483647], got 0"},
      {-1, 0, {}, "--every: expected an integer in [1, 2147483647], got -1"},
      {1, -1, {}, "--last: expected an integer in [1, 2147483647], got -1"},
      {1, INT_MIN, {}, "--last"},
  };
  for (const auto& e : edges) {
    INFO("every " << e.every << ", last " << e.last);
    selection_config c;
    c.every = e.every;
    c.last = e.last;
    if (e.error)
      CHECK_THROWS_WITH(select_checkpoints(names(3), c), Catch::Contains(e.error));
    else
      CHECK(select_checkpoints(names(3), c).kept() == e.want);
  }
}

TEST_CASE("step ranges and step order from the names", "[selection]") {
  const std::vector<std::string> given = {"s/step_300.pt", "s/step_100.pt", "s/step_200.pt", "s/step_400.pt"};
  selection_config c;
  c.sort_by_step = true;
  CHECK(select_checkpoints(given, c).kept() ==
        std::vector<std::string>{"s/step_100.pt", "s/step_200.pt", "s/step_300.pt", "s/step_400.pt"});
  c.from_step = 200;  // inclusive: the last valid keeps 200, one past it does not
  c.to_step = 300;
  CHECK(select_checkpoints(given, c).kept() == std::vector<std::string>{"s/step_200.pt", "s/step_300.pt"});
  c.from_step = 201;
  c.to_step = 299;
  CHECK_THROWS_WITH(
      select_checkpoints(given, c),
      Catch::Contains("--from-step 201 --to-step 299 keeps none of the 4 inputs") && Catch::Contains("100 to 400"));
  c.from_step = 300;
  c.to_step = 299;
  CHECK_THROWS_WITH(select_checkpoints(given, c), Catch::Contains("--from-step 300 is past --to-step 299"));
  c.to_step = 300;
  CHECK(select_checkpoints(given, c).kept() == std::vector<std::string>{"s/step_300.pt"});
  selection_config range;
  range.to_step = 100;
  CHECK_THROWS_WITH(select_checkpoints({"s/step_100.pt", "s/last.pt"}, range),
                    Catch::Contains("s/last.pt: no step found") && Catch::Contains("--to-step needs each"));
}

TEST_CASE("top and bottom N by a metric keep step order and the earlier of a tie", "[selection]") {
  test::temp_dir dir;
  std::ofstream(dir / "m.csv") << "step,acc\n1,0.5\n2,0.75\n3,0.625\n4,0.75\n5,0.25\n";
  std::vector<std::string> given;
  for (int i = 1; i <= 5; ++i) given.push_back(dir / ("ckpt_" + std::to_string(i) + ".pt"));
  selection_config c;
  c.metric = "acc";
  c.metric_file = dir / "m.csv";
  c.rank = metric_rank::top;
  c.rank_count = 1;  // 0.75 twice: the earlier (step 2), as sorted(reverse=True)[:1]
  CHECK(select_checkpoints(given, c).kept() == std::vector<std::string>{given[1]});
  c.rank_count = 3;
  CHECK(select_checkpoints(given, c).kept() == std::vector<std::string>{given[1], given[2], given[3]});
  c.rank = metric_rank::bottom;
  c.rank_count = 2;
  CHECK(select_checkpoints(given, c).kept() == std::vector<std::string>{given[0], given[4]});
  c.rank_count = 5;  // the last valid: all
  CHECK(select_checkpoints(given, c).kept() == given);
  c.rank_count = 6;  // more than there are: all kept, with a warning
  CHECK(select_checkpoints(given, c).kept() == given);
  c.last = 2;  // --last before the rank: the best of the latest two
  c.rank_count = 1;
  CHECK(select_checkpoints(given, c).kept() == std::vector<std::string>{given[4]});
  c.rank_count = 0;
  CHECK_THROWS_WITH(select_checkpoints(given, c), Catch::Contains("--bottom: expected an integer in [1, 2147483647]"));
}

TEST_CASE("a checkpoint without the metric is an error naming it", "[selection]") {
  test::temp_dir dir;
  std::ofstream(dir / "m.json") << R"({"1": 0.5, "3": 0.25})";
  const std::vector<std::string> given = {dir / "ckpt_1.pt", dir / "ckpt_2.pt", dir / "ckpt_3.pt"};
  selection_config c;
  c.metric = "loss";
  c.metric_file = dir / "m.json";
  c.rank = metric_rank::bottom;
  c.rank_count = 1;
  CHECK_THROWS_WITH(select_checkpoints(given, c),
                    Catch::Contains("ckpt_2.pt: no metric 'loss'") && Catch::Contains("has no 'loss' at its step 2"));
  c.from_step = 3;  // left out before the rank: not needed
  CHECK(select_checkpoints(given, c).kept() == std::vector<std::string>{given[2]});
  selection_config no_metric;
  no_metric.rank = metric_rank::top;
  no_metric.rank_count = 1;
  CHECK_THROWS_WITH(select_checkpoints(given, no_metric), Catch::Contains("--top N ranks by a metric: add --metric"));
  selection_config missing = c;
  missing.metric_file = dir / "none.csv";
  CHECK_THROWS_AS(select_checkpoints(given, missing), io_error);
  CHECK_THROWS_WITH(select_checkpoints(given, missing), Catch::StartsWith("--metric-file " + (dir / "none.csv")));
  selection_config no_rank;
  no_rank.metric = "loss";
  CHECK_THROWS_WITH(select_checkpoints(given, no_rank), Catch::Contains("--metric names what --top N or --bottom N"));
}

TEST_CASE("the selection's record names every candidate", "[selection]") {
  selection_config c;
  c.sort_by_step = true;
  c.last = 1;
  const checkpoint_selection s = select_checkpoints({"b/step_2.pt", "a/step_1.pt"}, c);
  const nlohmann::ordered_json j = selection_object(s);
  CHECK(j["last"] == 1);
  REQUIRE(j["candidates"].size() == 2);
  CHECK(j["candidates"][0]["path"] == "a/step_1.pt");
  CHECK(j["candidates"][0]["kept"] == false);
  CHECK(j["candidates"][0]["dropped_by"] == "--last");
  CHECK(j["candidates"][1]["step"] == 2);
  CHECK(j["candidates"][1]["step_source"] == "name");
  const std::vector<std::string> lines = selection_lines(s);
  CHECK(lines[1] == "kept  step 2 (name)  b/step_2.pt");
}
