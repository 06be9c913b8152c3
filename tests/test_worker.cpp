// Which worker this process is: --shard, --shard-count and the launchers' environment.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/worker.h"
#include "util/error.h"

using namespace swavg;

namespace {

env_lookup env_of(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("workers from --shard and the environment, in order", "[worker]") {
  const auto none = env_of({});
  CHECK(resolve_worker("", std::nullopt, true, none).source == "none");
  const worker_id s = resolve_worker("2/4", std::nullopt, true, env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}}));
  CHECK((s.index == 2 && s.count == 4 && s.source == "--shard"));
  // A file output ignores the environment.
  CHECK(resolve_worker("", std::nullopt, false, env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}})).count == 1);
  const auto all = env_of({{"SLURM_ARRAY_TASK_ID", "7"},
                           {"SLURM_ARRAY_TASK_MIN", "5"},
                           {"SLURM_ARRAY_TASK_COUNT", "3"},
                           {"SLURM_PROCID", "0"},
                           {"SLURM_NTASKS", "1"},
                           {"RANK", "0"},
                           {"WORLD_SIZE", "9"},
                           {"JOB_COMPLETION_INDEX", "3"}});
  const worker_id a = resolve_worker("", std::nullopt, true, all);
  CHECK((a.index == 2 && a.count == 3 && a.source == "SLURM_ARRAY_TASK_ID"));
  const worker_id step = resolve_worker(
      "", std::nullopt, true,
      env_of({{"SLURM_ARRAY_TASK_ID", "6"}, {"SLURM_ARRAY_TASK_STEP", "2"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}));
  CHECK(step.index == 3);
  const worker_id p =
      resolve_worker("", std::nullopt, true,
                     env_of({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"RANK", "0"}, {"WORLD_SIZE", "2"}}));
  CHECK((p.index == 3 && p.source == "SLURM_PROCID"));
  const worker_id r = resolve_worker("", std::nullopt, true,
                                     env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"JOB_COMPLETION_INDEX", "0"}}));
  CHECK((r.index == 1 && r.source == "RANK"));
  const worker_id k = resolve_worker("", 4, true, env_of({{"JOB_COMPLETION_INDEX", "3"}}));
  CHECK((k.index == 3 && k.count == 4 && k.source == "JOB_COMPLETION_INDEX"));
  CHECK(resolve_worker("0/1", std::nullopt, true, none).count == 1);
  CHECK(resolve_worker("999999/1000000", std::nullopt, true, none).index == 999999);  // the last valid
  // The last valid counts of the other forms, and SLURM_ARRAY_TASK_MIN at its largest (the task itself).
  const worker_id k_last = resolve_worker("", 1000000, true, env_of({{"JOB_COMPLETION_INDEX", "999999"}}));
  CHECK((k_last.index == 999999 && k_last.count == 1000000));
  CHECK(resolve_worker("", std::nullopt, true, env_of({{"RANK", "999999"}, {"WORLD_SIZE", "1000000"}})).count ==
        1000000);
  const worker_id min_is_task = resolve_worker(
      "", std::nullopt, true,
      env_of({{"SLURM_ARRAY_TASK_ID", "2"}, {"SLURM_ARRAY_TASK_MIN", "2"}, {"SLURM_ARRAY_TASK_COUNT", "3"}}));
  CHECK((min_is_task.index == 0 && min_is_task.count == 3));

  struct bad_case {
    std::string shard;
    std::optional<int64_t> count;
    bool directory;
    std::map<std::string, std::string> env;
    std::string named;
  };
  const std::vector<bad_case> bad = {
      {"4/4", {}, true, {}, "--shard"},
      {"-1/4", {}, true, {}, "--shard"},
      {"1/0", {}, true, {}, "--shard"},
      {"0/1000001", {}, true, {}, "--shard"},  // the first invalid count
      {"1", {}, true, {}, "--shard"},
      {"a/b", {}, true, {}, "--shard"},
      {"0/2", {}, false, {}, "--shard"},
      {"0/2", 2, true, {}, "--shard-count"},
      {"", 2, false, {}, "--shard-count"},
      {"", 2, true, {}, "--shard-count"},
      {"", 0, true, {{"JOB_COMPLETION_INDEX", "0"}}, "--shard-count"},
      {"", 1000001, true, {{"JOB_COMPLETION_INDEX", "0"}}, "--shard-count"},  // the first invalid count
      {"", {}, true, {{"RANK", "0"}, {"WORLD_SIZE", "1000001"}}, "WORLD_SIZE"},
      {"", {}, true, {{"JOB_COMPLETION_INDEX", "0"}}, "--shard-count"},
      {"", 4, true, {{"JOB_COMPLETION_INDEX", "4"}}, "JOB_COMPLETION_INDEX"},
      {"", {}, true, {{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK"},
      {"", {}, true, {{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK"},
      {"", {}, true, {{"RANK", "1"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE"},
      {"", {}, true, {{"RANK", "1"}}, "WORLD_SIZE"},
      {"", {}, true, {{"RANK", " 1"}, {"WORLD_SIZE", "2"}}, "RANK"},
      {"", {}, true, {{"SLURM_PROCID", "1.0"}, {"SLURM_NTASKS", "2"}}, "SLURM_PROCID"},
      {"", {}, true, {{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "3"}}, "SLURM_ARRAY_TASK_ID"},
      {"",
       {},
       true,
       {{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_MIN", "2"}, {"SLURM_ARRAY_TASK_COUNT", "3"}},
       "SLURM_ARRAY_TASK_MIN"},
      {"",
       {},
       true,
       {{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_STEP", "2"}, {"SLURM_ARRAY_TASK_COUNT", "3"}},
       "SLURM_ARRAY_TASK_STEP"},
      {"", {}, true, {{"SLURM_ARRAY_TASK_ID", "0"}}, "SLURM_ARRAY_TASK_COUNT"},
  };
  for (const auto& b : bad) {
    CAPTURE(b.shard, b.named);
    try {
      resolve_worker(b.shard, b.count, b.directory, env_of(b.env));
      FAIL("accepted");
    } catch (const usage_error& e) {
      CHECK(std::string(e.what()).find(b.named) != std::string::npos);
    }
  }
}
