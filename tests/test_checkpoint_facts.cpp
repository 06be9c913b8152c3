// What a checkpoint records about its training (formats/io/checkpoint_facts.h): the step in a name,
// step -> value tables from CSV and JSON, and the steps and metrics of real Trainer, Lightning and
// timm runs against what Python read from the same files (trainer_runs/*/reference.json).
#include <catch2/catch.hpp>

#include <cstdint>
#include <filesystem>
#include <fstream>

#include "formats/io/checkpoint_facts.h"
#include "support.h"

using namespace swavg;

namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

}  // namespace

TEST_CASE("the step in a checkpoint's name", "[checkpoint_facts]") {
  struct name_case {
    const char* path;
    std::optional<int64_t> step;
  };
  const std::vector<name_case> cases = {
      {"ckpt_10.pt", 10},
      {"runs/v2/ckpt_10.pt", 10},
      {"checkpoint-12.pth.tar", 12},
      {"out/checkpoint-500/", 500},
      {"out/checkpoint-500", 500},
      {"global_step100", 100},
      {"epoch=3-step=400-val_loss=0.2310.ckpt", 400},  // Lightning: step=, not the last number
      {"step=7.ckpt", 7},
      {"epoch=3-val_loss=0.2310.ckpt", std::nullopt},  // NAME=VALUE without step=: no guess
      {"last.ckpt", std::nullopt},
      {"model.pt2", std::nullopt},  // an extension's digits are not a step
      {"out/checkpoint-500/model.safetensors", 500},
      {"step_9223372036854775807.pt", INT64_MAX},     // the last valid
      {"step_9223372036854775808.pt", std::nullopt},  // the first invalid: past int64
      {"ckpt-0004096.pt", 4096},
  };
  for (const auto& c : cases) {
    INFO(c.path);
    CHECK(step_in_name(c.path) == c.step);
  }
}

TEST_CASE("metric tables from CSV and JSON", "[checkpoint_facts]") {
  test::temp_dir dir;
  SECTION("CSV, Lightning's metrics.csv: empty cells skipped, the last row of a step wins") {
    write(dir / "m.csv", "epoch,step,train_loss,val_acc\r\n0,100,0.9,\r\n0,100,,0.5\r\n1,200,,0.75\r\n1,200,,0.8\r\n");
    const metric_table t = read_metric_table(dir / "m.csv", "val_acc");
    CHECK(t.values == std::map<int64_t, double>{{100, 0.5}, {200, 0.8}});
    CHECK_THROWS_WITH(read_metric_table(dir / "m.csv", "val_loss"),
                      Catch::Contains("must name a 'step' column and a 'val_loss' column"));
  }
  SECTION("JSON: a trainer_state.json, a list of entries, an object of steps") {
    write(dir / "state.json", R"({"global_step": 4, "log_history": [{"loss": 1.0, "step": 2},
          {"eval_loss": 0.7, "step": 2}, {"eval_loss": 0.6, "step": 4}]})");
    CHECK(read_metric_table(dir / "state.json", "eval_loss").values == std::map<int64_t, double>{{2, 0.7}, {4, 0.6}});
    CHECK(read_metric_table(dir / "state.json", "loss").values == std::map<int64_t, double>{{2, 0.7}, {4, 0.6}});
    write(dir / "list.json", R"([{"step": 1, "acc": 0.25}, {"step": 3, "other": 1}, {"step": 3, "acc": 0.5}])");
    CHECK(read_metric_table(dir / "list.json", "acc").values == std::map<int64_t, double>{{1, 0.25}, {3, 0.5}});
    write(dir / "map.json", R"({"10": 1.5, "20": 2})");
    CHECK(read_metric_table(dir / "map.json", "x").values == std::map<int64_t, double>{{10, 1.5}, {20, 2.0}});
  }
  SECTION("steps at their edges: digits up to int64's largest, decimals up to 2^53") {
    write(dir / "edge.csv",
          "step,acc\n9223372036854775807,0.5\n9007199254740992.0,0.25\n0,1\n");  // the last valid ones
    CHECK(read_metric_table(dir / "edge.csv", "acc").values ==
          std::map<int64_t, double>{{0, 1.0}, {9007199254740992, 0.25}, {INT64_MAX, 0.5}});
    for (const char* first_invalid : {"9223372036854775808", "9007199254740994.0", "-1"}) {
      INFO(first_invalid);
      write(dir / "edge.csv", std::string("step,acc\n") + first_invalid + ",0.5\n");
      CHECK_THROWS_WITH(read_metric_table(dir / "edge.csv", "acc"), Catch::Contains("is not a non-negative integer"));
    }
    write(dir / "edge.json", R"({"9223372036854775807": 0.5})");
    CHECK(read_metric_table(dir / "edge.json", "acc").values == std::map<int64_t, double>{{INT64_MAX, 0.5}});
    write(dir / "edge.json", R"({"9223372036854775808": 0.5})");
    CHECK_THROWS_WITH(read_metric_table(dir / "edge.json", "acc"), Catch::Contains("expected a step"));
    write(dir / "edge.json", R"([{"step": 9007199254740992.0, "acc": 0.5}])");
    CHECK(read_metric_table(dir / "edge.json", "acc").values == std::map<int64_t, double>{{9007199254740992, 0.5}});
    write(dir / "edge.json", R"([{"step": 9007199254740994.0, "acc": 0.5}])");
    CHECK_THROWS_WITH(read_metric_table(dir / "edge.json", "acc"), Catch::Contains("without a \"step\""));
  }
  SECTION("the size bound: kMaxMetricFileBytes read, one byte more refused before reading") {
    const std::string path = dir / "big.csv";
    write(path, "step,acc\n1,0.5\n");
    std::filesystem::resize_file(path, kMaxMetricFileBytes);  // sparse: NUL bytes after the rows
    CHECK_THROWS_WITH(read_metric_table(path, "acc"), Catch::Contains("line 3: 1 fields, the header has 2"));
    std::filesystem::resize_file(path, kMaxMetricFileBytes + 1);
    CHECK_THROWS_WITH(read_metric_table(path, "acc"), Catch::Contains("larger than 268435456 bytes"));
  }
  SECTION("what is refused, naming the file and the place") {
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"step,acc\n-1,0.5\n", "line 2: step '-1' is not a non-negative integer"},
        {"step,acc\n1.5,0.5\n", "line 2: step '1.5'"},
        {"step,acc\n1,abc\n", "line 2: acc 'abc' is not a number"},
        {"step,acc\n1,0.5,9\n", "line 2: 3 fields, the header has 2"},
        {"step,acc\n1,nan\n", "metric 'acc' is nan"},
        {"step,acc\n1,\n", "holds no value of 'acc'"},
        {"", "empty"},
        {R"({"a": 1})", "key \"a\": expected a step"},
        {R"([{"acc": 1}])", "holds 'acc' without a \"step\""},
        {R"({"1": 0.5,)", "not valid JSON"},
        {R"({"1": NaN})", "not valid JSON (a NaN or Infinity"},
        {R"({"1": 0.5, "1": 0.6})", "the key \"1\" appears twice"},
        {std::string(64, '[') + std::string(64, ']'), "holds no value of 'acc'"},  // the deepest read
        {std::string(65, '[') + std::string(65, ']'), "JSON nests deeper than 64 levels"},
    };
    for (const auto& [text, message] : bad) {
      INFO(text);
      write(dir / "bad", text);
      CHECK_THROWS_WITH(read_metric_table(dir / "bad", "acc"), Catch::Contains(message));
    }
  }
}

TEST_CASE("a trainer_state.json beside the weights gives the step and the metric", "[checkpoint_facts]") {
  test::temp_dir dir;
  std::filesystem::create_directory(dir / "checkpoint-7");
  write(dir / "checkpoint-7/model.safetensors", "x");
  write(dir / "checkpoint-7/trainer_state.json",
        R"({"global_step": 6, "log_history": [{"eval_loss": 0.9, "step": 4}, {"loss": 2, "step": 6},
            {"eval_loss": 0.5, "step": 6}, {"eval_loss": 0.25, "step": 6}]})");
  for (const std::string path : {dir / "checkpoint-7", dir / "checkpoint-7/model.safetensors"}) {
    const checkpoint_facts f = read_checkpoint_facts(path, "eval_loss");
    REQUIRE(f.step);
    CHECK(f.step->value == 6);  // the record, not the name's 7
    REQUIRE(f.metric);
    CHECK(f.metric->value == 0.25);  // the last logged at global_step
  }
  // Trainer's metric_for_best_model rule: "loss" is eval_loss, not the training loss logged beside it.
  const checkpoint_facts loss = read_checkpoint_facts(dir / "checkpoint-7", "loss");
  REQUIRE(loss.metric);
  CHECK(loss.metric->value == 0.25);
  CHECK(loss.metric->source == "trainer_state.json log_history 'eval_loss'");
  const checkpoint_facts none = read_checkpoint_facts(dir / "checkpoint-7", "eval_acc");
  CHECK_FALSE(none.metric);
  CHECK_THAT(none.looked, Catch::Contains("no 'eval_acc' at step 6") && Catch::Contains("'eval_loss'"));
  write(dir / "checkpoint-7/trainer_state.json", R"({"global_step": -1})");
  CHECK_THROWS_WITH(read_checkpoint_facts(dir / "checkpoint-7", ""), Catch::Contains("\"global_step\""));
}

TEST_CASE("a run folder's entry: its own records and name, never the run's, and save_steps at its edge",
          "[checkpoint_facts]") {
  test::temp_dir dir;
  std::filesystem::create_directory(dir / "run7");
  write(dir / "run7/trainer_state.json", R"({"global_step": 99})");  // the run's, after training
  write(dir / "run7/model.safetensors", "x");
  CHECK_FALSE(read_entry_facts(dir / "run7/model.safetensors").step);  // not 99, not the folder's 7
  std::filesystem::create_directory(dir / "run7/checkpoint-4");
  write(dir / "run7/checkpoint-4/trainer_state.json", R"({"global_step": 4, "save_steps": 1})");
  const checkpoint_facts f = read_entry_facts(dir / "run7/checkpoint-4");
  REQUIRE(f.step);
  CHECK(f.step->value == 4);
  CHECK(f.save_steps == std::optional<int64_t>(1));  // the last valid
  write(dir / "run7/checkpoint-4/trainer_state.json", R"({"global_step": 4, "save_steps": 0})");
  CHECK_FALSE(read_entry_facts(dir / "run7/checkpoint-4").save_steps);  // the first invalid: no interval
  write(dir / "run7/checkpoint-4/trainer_state.json", R"({"global_step": 4, "save_steps": -2})");
  CHECK_FALSE(read_entry_facts(dir / "run7/checkpoint-4").save_steps);
  CHECK(step_in_entry_name(dir / "run7/ckpt.pt") == std::nullopt);
  CHECK(step_in_entry_name(dir / "run7/checkpoint-4/") == std::optional<int64_t>(4));
}

TEST_CASE("real runs: steps and metrics as Python reads them", "[checkpoint_facts][fixtures]") {
  if (!std::filesystem::exists(test::fixture("trainer_runs/plain/reference.json"))) {
    // scripts/fixtures/trainer_runs.py skips the family where transformers, Lightning or timm is not
    // importable (the sanitizer preset's system Python); the venv setup.sh makes has them all.
    WARN("no trainer_runs fixtures (their libraries are not importable by the fixtures' Python): skipped");
    return;
  }
  for (const std::string run : {"hf", "lightning", "timm", "plain"}) {
    const std::string folder = test::fixture("trainer_runs/" + run);
    const nlohmann::json ref = test::read_json(folder + "/reference.json");
    const std::string metric = ref.at("metric");
    for (const auto& c : ref.at("checkpoints")) {
      const std::string path = folder + "/" + c.at("path").get<std::string>();
      INFO(path);
      const checkpoint_facts f = read_checkpoint_facts(path, run == "plain" ? "" : metric);
      if (c.at("step").is_null()) {
        CHECK_FALSE(f.step);
      } else {
        REQUIRE(f.step);
        CHECK(f.step->value == c.at("step").get<int64_t>());
      }
      if (run == "plain") continue;
      REQUIRE(f.metric);
      CHECK(f.metric->value == c.at("value").get<double>());  // exactly: float32 or float64 as stored
    }
  }
}
