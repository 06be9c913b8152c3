// Which checkpoints swavg watch folds next (fold/watch_queue.h): step order, whole and settled,
// a checkpoint being written holding the later ones back until it stalls, and every pass-over
// reason, each at its edge.
#include <catch2/catch.hpp>

#include "fold/watch_queue.h"

using namespace swavg;

namespace {

watch_entry whole(const std::string& path, int64_t step, double unchanged = 10) {
  return {path, step, true, unchanged};
}

std::vector<std::string> folded_paths(const std::vector<watch_entry>& e, const watch_decision& d) {
  std::vector<std::string> p;
  for (size_t i : d.fold) p.push_back(e[i].path);
  return p;
}

std::string why(const std::vector<watch_entry>& e, const watch_decision& d, const std::string& path) {
  for (const auto& p : d.passed)
    if (e[p.entry].path == path) return p.why;
  return "";
}

}  // namespace

TEST_CASE("watch queue: folded in step order, not name order, each path once", "[watch_queue][unit]") {
  const std::vector<watch_entry> e = {whole("run/ckpt_10", 10), whole("run/ckpt_9", 9), whole("run/b", 20),
                                      whole("run/a", 20)};
  const watch_decision d = decide_watch(e, {}, std::nullopt, {});
  // Two checkpoints of one step: the first by path is folded, the second passed over.
  CHECK(folded_paths(e, d) == std::vector<std::string>{"run/ckpt_9", "run/ckpt_10", "run/a"});
  CHECK_THAT(why(e, d, "run/b"), Catch::Contains("step 20 was folded just before it"));
  const watch_decision again = decide_watch(e, {"run/ckpt_9", "run/ckpt_10", "run/a"}, 20, {});
  CHECK(again.fold.empty());
  CHECK_THAT(why(e, again, "run/b"), Catch::Contains("not after step 20, the last one folded"));
  CHECK(why(e, again, "run/a").empty());  // folded ones are not passed over: they are done
}

TEST_CASE("watch queue: a restarted watcher folds only the steps after the last folded", "[watch_queue][unit]") {
  const std::vector<watch_entry> e = {whole("r/5", 5), whole("r/6", 6), whole("r/7", 7)};
  const watch_decision d = decide_watch(e, {"r/6"}, 6, {});
  CHECK(folded_paths(e, d) == std::vector<std::string>{"r/7"});
  // r/5 was written late (or its fold was lost with a record that never listed it): never out of order.
  CHECK_THAT(why(e, d, "r/5"), Catch::Contains("step 5 is not after step 6"));
}

TEST_CASE("watch queue: --settle, at its edge", "[watch_queue][unit]") {
  watch_rules r;
  r.settle = 2.0;
  CHECK(settled(2.0, r));  // the rule the watcher asks before reading a checkpoint at all
  CHECK(!settled(std::nextafter(2.0, 0.0), r));
  const std::vector<watch_entry> last_valid = {whole("r/1", 1, 2.0)};
  CHECK(decide_watch(last_valid, {}, std::nullopt, r).fold.size() == 1);
  const std::vector<watch_entry> first_invalid = {whole("r/1", 1, std::nextafter(2.0, 0.0))};
  const watch_decision d = decide_watch(first_invalid, {}, std::nullopt, r);
  CHECK(d.fold.empty());
  REQUIRE(d.waiting_for);
  CHECK(*d.waiting_for == 0);
}

TEST_CASE("watch queue: an unfinished checkpoint holds later steps back until it stalls", "[watch_queue][unit]") {
  watch_rules r;
  r.stall = 600.0;
  std::vector<watch_entry> e = {whole("r/1", 1), {"r/2", 2, false, 599.0}, whole("r/3", 3)};
  watch_decision d = decide_watch(e, {}, std::nullopt, r);
  CHECK(folded_paths(e, d) == std::vector<std::string>{"r/1"});  // r/3 waits for r/2: step order before speed
  REQUIRE(d.waiting_for);
  CHECK(e[*d.waiting_for].path == "r/2");
  e[1].unchanged_for = 600.0;  // the first stalled: no longer waited for
  d = decide_watch(e, {}, std::nullopt, r);
  CHECK(folded_paths(e, d) == std::vector<std::string>{"r/1", "r/3"});
  CHECK(d.stalled == std::vector<size_t>{1});
  CHECK(!d.waiting_for);
  // A later unfinished one holds nothing back but itself.
  e = {whole("r/1", 1), {"r/2", 2, false, 0.0}};
  d = decide_watch(e, {}, std::nullopt, r);
  CHECK(folded_paths(e, d) == std::vector<std::string>{"r/1"});
}

TEST_CASE("watch queue: --from-step and --to-step, at their edges", "[watch_queue][unit]") {
  watch_rules r;
  r.from_step = 100;
  r.to_step = 300;
  const std::vector<watch_entry> e = {whole("r/99", 99), whole("r/100", 100), whole("r/300", 300), whole("r/301", 301)};
  const watch_decision d = decide_watch(e, {}, std::nullopt, r);
  CHECK(folded_paths(e, d) == std::vector<std::string>{"r/100", "r/300"});
  CHECK_THAT(why(e, d, "r/99"), Catch::Contains("step 99 is before --from-step 100"));
  CHECK_THAT(why(e, d, "r/301"), Catch::Contains("step 301 is after --to-step 300"));
}

TEST_CASE("watch queue: a whole checkpoint without a step is passed over, an unfinished one waited for",
          "[watch_queue][unit]") {
  const std::vector<watch_entry> e = {
      {"r/last.ckpt", std::nullopt, true, 10}, {"r/model.pt", std::nullopt, false, 0}, whole("r/1", 1)};
  const watch_decision d = decide_watch(e, {}, std::nullopt, {});
  CHECK(folded_paths(e, d) == std::vector<std::string>{"r/1"});
  CHECK_THAT(why(e, d, "r/last.ckpt"), Catch::Contains("no step"));
  CHECK(why(e, d, "r/model.pt").empty());
}
