#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cli/worker.h"
#include "formats/hf_index.h"
#include "formats/load.h"
#include "formats/output_folder.h"
#include "formats/shard_layout.h"
#include "formats/sharded_output.h"
#include "formats/worker_files.h"
#include "util/atomic_dir.h"
#include "util/error.h"
#include "util/sha256.h"
#include "support.h"

using namespace swavg;

namespace {

using shards = std::vector<std::vector<size_t>>;

tensor_spec spec(const std::string& name, int64_t elements) { return tensor_spec{name, dtype::uint8, {elements}, {}}; }

std::string run_python(const std::string& code, const std::string& arg) {
  const std::string cmd = std::string(SWAVG_PYTHON) + " -c '" + code + "' '" + arg + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  REQUIRE(::pclose(p) == 0);
  return out;
}

env_lookup env_of(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

}  // namespace

TEST_CASE("greedy packing at the limit's edges", "[sharded_output]") {
  CHECK(pack_shards({5, 5}, 10) == shards{{0, 1}});             // exactly at the limit
  CHECK(pack_shards({5, 6}, 10) == shards{{0}, {1}});           // one byte over
  CHECK(pack_shards({3, 25, 4}, 10) == shards{{0}, {1}, {2}});  // larger than the limit: alone
  CHECK(pack_shards({25, 3}, 10) == shards{{0}, {1}});
  CHECK(pack_shards({1, 2, 3}, 1000) == shards{{0, 1, 2}});         // all in one
  CHECK(pack_shards({10, 0, 0, 1}, 10) == shards{{0, 1, 2}, {3}});  // empty tensors join
  CHECK(pack_shards({0, 11}, 10) == shards{{0}, {1}});
  CHECK(pack_shards({}, 10).empty());
  CHECK(pack_shards({UINT64_MAX, 1}, UINT64_MAX) == shards{{0}, {1}});  // no overflow
}

TEST_CASE("layout: names, the single-file case and total_size", "[sharded_output]") {
  const auto one = plan_layout(output_format::safetensors, {spec("a", 4), spec("b", 4)}, 100);
  REQUIRE(one.shards.size() == 1);
  CHECK(one.shards[0].file == "model.safetensors");
  CHECK_FALSE(one.indexed());
  CHECK(plan_layout(output_format::torch, {spec("a", 4)}, 100).shards[0].file == "pytorch_model.bin");
  const auto three = plan_layout(output_format::torch, {spec("a", 4), spec("b", 4), spec("c", 4)}, 4);
  REQUIRE(three.shards.size() == 3);
  CHECK(three.shards[2].file == "pytorch_model-00003-of-00003.bin");
  CHECK(three.total_size == 12);
  CHECK(output_index_name(output_format::torch) == std::string("pytorch_model.bin.index.json"));
  // A float32 tensor counts 4 bytes an element.
  const auto f32 = plan_layout(output_format::safetensors, {tensor_spec{"w", dtype::float32, {2, 3}, {}}}, 100);
  CHECK(f32.total_size == 24);
}

TEST_CASE("shard names past 99999 shards", "[sharded_output]") {
  CHECK(shard_file_name(file_format::safetensors, 1, 99999) == "model-00001-of-99999.safetensors");
  CHECK(shard_file_name(file_format::safetensors, 7, 100000) == "model-00007-of-100000.safetensors");
  CHECK(shard_file_name(file_format::torch, 100000, 100000) == "pytorch_model-100000-of-100000.bin");
  std::vector<uint64_t> sizes(100000, 1);
  CHECK(pack_shards(sizes, 1).size() == 100000);
}

TEST_CASE("shard size option: units, last valid and first invalid", "[sharded_output]") {
  struct good_case {
    const char* text;
    uint64_t bytes;
  };
  const std::vector<good_case> good = {
      {"5GB", 5'000'000'000},
      {"500MB", 500'000'000},
      {"2MB", 2'000'000},
      {"1KB", 1000},
      {"1TB", 1'000'000'000'000},
      {"1.5GB", 1'500'000'000},
      {"123", 123},
      {"1", 1},
      {"2MiB", 2 << 20},
      {"1kib", 1024},
      {"3GiB", uint64_t(3) << 30},
      {"5gB", 5'000'000'000},
      {"8Mb", 1'000'000},  // a lowercase final b: bits, as transformers reads it
      {"5gb", 625'000'000},
      {"9223372036854775807", 9223372036854775807ull},  // the last valid
      {"8388607TiB", 8388607ull << 40},
  };
  for (const auto& g : good) {
    CAPTURE(g.text);
    CHECK(parse_shard_size(g.text) == g.bytes);
  }
  const std::vector<std::string> bad = {
      "0",
      "0MB",
      "-1",
      "-5GB",
      "",
      "GB",
      "5 GB",
      " 5GB",
      "5GBB",
      "5XB",
      "1.",
      ".5GB",
      "1e9",
      "0x10",
      "1.0000001KB",
      "9223372036854775808",  // the first invalid
      "8388608TiB",
      "99999999999999999999999",
      "1b",
  };
  for (const auto& b : bad) {
    CAPTURE(b);
    try {
      parse_shard_size(b);
      FAIL("accepted");
    } catch (const usage_error& e) {
      CHECK(std::string(e.what()).find("--max-shard-size") != std::string::npos);
    }
  }
}

TEST_CASE("the index is byte for byte what Python's json.dumps writes", "[sharded_output]") {
  auto layout = plan_layout(output_format::safetensors,
                            {spec("z.weight", 10), spec("a.bias", 3), spec("caf\xc3\xa9", 5), spec("m\"q\\x\n", 9),
                             spec("del\x7f/\xf0\x9f\x98\x80", 1)},
                            12);
  REQUIRE(layout.shards.size() == 3);
  const std::string text = index_json(layout);
  const std::string path = "index_case.json";
  std::ofstream(path, std::ios::binary) << text;
  const std::string python = run_python(
      "import json,sys; d=json.load(open(sys.argv[1])); sys.stdout.write(json.dumps(d, indent=2, sort_keys=True) + "
      "\"\\n\")",
      path);
  CHECK(python == text);
  CHECK(text.find("\"total_size\": 28") != std::string::npos);
  ::unlink(path.c_str());
}

TEST_CASE("plan and manifest round trips, and malformed ones", "[sharded_output]") {
  const hf_folder_writer writer(hf_writer_options{"out", output_format::torch, 8, {}, ""});
  auto layout = writer.plan({spec("a", 4), spec("b", 4), spec("c", 4)}, {});
  REQUIRE(layout.index_name == "pytorch_model.bin.index.json");
  CHECK(layout.index_bytes == index_json(layout));
  const std::string text = plan_json(layout, {{"swavg", "{}"}, {"format", "pt"}}, {"config.json"}, 2);
  const job_plan p = parse_plan(text, "plan");
  CHECK(p.workers == 2);
  CHECK(p.layout.format == output_format::torch);
  REQUIRE(p.layout.shards.size() == 2);
  CHECK(p.layout.shards[1].file == layout.shards[1].file);
  CHECK(p.layout.index_name == layout.index_name);
  CHECK(p.layout.index_bytes == layout.index_bytes);
  CHECK(p.copied == std::vector<std::string>{"config.json"});
  CHECK(plan_json(layout, {{"swavg", "{}"}, {"format", "pt"}}, {"config.json"}, 2) == text);  // deterministic

  const std::vector<std::string> bad_plans = {
      "",
      "[]",
      "{\"swavg_plan\": 1}",
      R"({"swavg_plan":2,"format":"x","max_shard_size":1,"workers":1,"total_size":0,"shards":[],"copied":[]})",
      R"({"swavg_plan":2,"format":"torch","max_shard_size":1,"workers":1,"total_size":0,"shards":[],"copied":[]})",
      R"({"swavg_plan":2,"format":"torch","max_shard_size":1,"workers":0,"total_size":1,"shards":[{"file":"a","bytes":1,"tensors":["x"]}],"copied":[]})",
      R"({"swavg_plan":2,"format":"torch","max_shard_size":1,"workers":1,"total_size":2,"shards":[{"file":"a","bytes":1,"tensors":["x"]}],"copied":[]})",
      R"({"swavg_plan":2,"format":"torch","max_shard_size":1,"workers":1,"total_size":1,"shards":[{"file":"../a","bytes":1,"tensors":["x"]}],"copied":[]})",
      R"({"swavg_plan":2,"format":"torch","max_shard_size":1,"workers":1,"total_size":1,"shards":[{"file":"a","bytes":1,"tensors":["x"]}],"copied":["b/c"]})",
  };
  for (const auto& b : bad_plans) {
    CAPTURE(b);
    CHECK_THROWS_AS(parse_plan(b, "plan"), input_error);
  }

  worker_manifest m{std::string(64, 'a'), 1, 2, {{"f", 3, std::string(64, 'b')}}};
  const worker_manifest back = parse_manifest(manifest_json(m), "m");
  CHECK(back.plan_hash == m.plan_hash);
  CHECK(back.index == 1);
  CHECK(back.files.at(0).size == 3);
  CHECK_THROWS_AS(
      parse_manifest(R"({"plan_hash":"x","index":0,"count":1,"files":[{"name":"f","size":1,"sha256":"zz"}]})", "m"),
      input_error);
  CHECK(manifest_name(3, 16) == "swavg-worker-3-of-16.json");
}

TEST_CASE("plans and manifests: bounds at their edges, missing fields, options", "[sharded_output]") {
  auto plan_with = [](const std::string& workers, size_t shards) {
    std::string list;
    for (size_t k = 0; k < shards; ++k)
      list += fmt::format("{}{{\"file\":\"s{}\",\"bytes\":1,\"tensors\":[\"t{}\"]}}", k ? "," : "", k, k);
    return fmt::format(
        R"({{"swavg_plan":2,"format":"torch","max_shard_size":1,"workers":{},"total_size":{},"shards":[{}],"copied":[]}})",
        workers, shards, list);
  };
  CHECK(parse_plan(plan_with("1000000", 1), "plan").workers == 1000000);
  CHECK_THROWS_WITH(parse_plan(plan_with("1000001", 1), "plan"), Catch::Contains("plan: 1000001 workers"));
  CHECK_THROWS_AS(parse_plan(plan_with("1000000000000", 1), "plan"), input_error);
  CHECK_THROWS_AS(parse_plan(plan_with("-1", 1), "plan"), input_error);
  CHECK(parse_plan(plan_with("2", 99999), "plan").layout.shards.size() == 99999);
  CHECK_THROWS_WITH(parse_plan(plan_with("2", 100000), "plan"), Catch::Contains("100000 shards (at most 99999)"));
  CHECK_THROWS_WITH(
      parse_plan(R"({"swavg_plan":2,"format":"torch","max_shard_size":1,"workers":1,"total_size":0,"copied":[]})",
                 "the/plan.json"),
      Catch::Contains("the/plan.json: no \"shards\" field"));
  CHECK_THROWS_WITH(
      parse_plan(
          R"({"swavg_plan":2,"format":"torch","max_shard_size":1,"workers":1,"total_size":0,"shards":{},"copied":[]})",
          "p"),
      Catch::Contains("\"shards\" is not a list"));

  const std::string good = std::string(64, 'a');
  auto manifest = [&](const std::string& index, const std::string& count) {
    return fmt::format(R"({{"plan_hash":"{}","index":{},"count":{},"files":[]}})", good, index, count);
  };
  CHECK(parse_manifest(manifest("999999", "1000000"), "m").count == 1000000);
  CHECK_THROWS_AS(parse_manifest(manifest("0", "1000001"), "m"), input_error);
  CHECK_THROWS_AS(parse_manifest(manifest("0", "1099511627776"), "m"), input_error);
  CHECK_THROWS_AS(parse_manifest(manifest("2", "2"), "m"), input_error);
  CHECK_THROWS_WITH(parse_manifest(R"({"plan_hash":"x","index":0,"count":1})", "the/manifest.json"),
                    Catch::Contains("the/manifest.json: no \"files\" field"));

  auto layout = plan_layout(output_format::torch, {spec("a", 4)}, 8);
  const std::string text = plan_json(layout, {}, {}, 2, {{"--weights", "1,3"}, {"--int", "latest"}});
  CHECK(text.find("\"--weights\": \"1,3\"") != std::string::npos);
  CHECK(parse_plan(text, "plan").workers == 2);
  CHECK(text != plan_json(layout, {}, {}, 2, {{"--weights", "3,1"}, {"--int", "latest"}}));
}

TEST_CASE("job file names are reserved", "[sharded_output]") {
  for (const char* name : {"swavg-plan.json", "swavg-worker-0-of-2.json", "swavg-worker-.json",
                           "out.swavg-finalize.json", "x.swavg-tmp-1"})
    CHECK(is_job_file_name(name));
  for (const char* name : {"config.json", "swavg-plan.json.bak", "my-swavg-plan.json", "swavg-worker.txt"})
    CHECK_FALSE(is_job_file_name(name));
}

TEST_CASE("a second plan names the first option that differs", "[sharded_output]") {
  const std::string dir = "plan_once_case";
  remove_tree(dir);
  ::mkdir(dir.c_str(), 0755);
  auto layout = plan_layout(output_format::torch, {spec("a", 4)}, 8);
  const std::string first =
      plan_json(layout, {}, {}, 2, {{"the mode", "swa"}, {"--buffers", "latest"}, {"--int", "latest"}});
  CHECK(write_plan_once(dir, first) == write_plan_once(dir, first));
  CHECK_THROWS_WITH(
      write_plan_once(
          dir, plan_json(layout, {}, {}, 2, {{"the mode", "swa"}, {"--buffers", "average"}, {"--int", "first"}})),
      Catch::Contains("--buffers differs: 'average' here, 'latest' in the plan there"));
  CHECK_THROWS_WITH(
      write_plan_once(
          dir, plan_json(layout, {}, {}, 3, {{"the mode", "swa"}, {"--buffers", "latest"}, {"--int", "latest"}})),
      Catch::Contains("\"workers\" differs: 3 here, 2"));
  CHECK_THROWS_AS(write_plan_once(dir, plan_json(layout, {{"x", "y"}}, {}, 2,
                                                 {{"the mode", "swa"}, {"--buffers", "latest"}, {"--int", "latest"}})),
                  mismatch_error);
  remove_tree(dir);
}

TEST_CASE("worker ownership: shard k belongs to worker (k-1) mod N", "[sharded_output]") {
  CHECK(worker_owns(0, 0, 4));
  CHECK(worker_owns(5, 1, 4));
  CHECK_FALSE(worker_owns(5, 2, 4));
  CHECK(worker_owns(7, 0, 1));
}

TEST_CASE("workers from --shard and the environment, in order", "[sharded_output]") {
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

TEST_CASE("folder files: weights, indexes and folders are not copied, symlinks are followed", "[sharded_output]") {
  const std::string dir = "classify_case";
  remove_tree(dir);
  ::mkdir(dir.c_str(), 0755);
  ::mkdir((dir + "/sub").c_str(), 0755);
  for (const char* name :
       {"config.json", "tokenizer.json", "README.md", "model-00001-of-00002.safetensors", "pytorch_model.bin",
        "model.safetensors.index.json", "x.pt", "x.pth", "x.ckpt", "tf_model.h5", "flax_model.msgpack", "m.gguf",
        "m.onnx", "blob", ".metadata", "__0_0.distcp", "metadata"})
    std::ofstream(dir + "/" + name) << name;
  REQUIRE(::symlink("blob", (dir + "/generation_config.json").c_str()) == 0);
  REQUIRE(::symlink("missing", (dir + "/dangling.txt").c_str()) == 0);
  const folder_files f = classify_folder(dir);
  CHECK(f.copied == std::vector<std::string>{"README.md", "blob", "config.json", "generation_config.json", "metadata",
                                             "tokenizer.json"});
  CHECK(f.skipped.size() == 14);  // 12 weights (a DCP .metadata and rank file), the folder, the dangling link
  const written_file w = copy_file_hashed(dir + "/generation_config.json", dir + "/sub/copy", "copy");
  CHECK(w.size == 4);
  CHECK(w.sha256 == sha256_file(dir + "/blob"));
  remove_tree(dir);
  struct stat st {};
  CHECK(::stat(dir.c_str(), &st) != 0);
}

TEST_CASE("the sharded sink writes only this worker's shards, each complete", "[sharded_output]") {
  const std::string dir = "sink_case";
  remove_tree(dir);
  ::mkdir(dir.c_str(), 0755);
  const auto layout =
      plan_layout(output_format::safetensors, {spec("a", 6), spec("b", 0), spec("c", 5), spec("d", 2)}, 6);
  REQUIRE(layout.shards.size() == 3);  // {a, b}, {c}, {d}
  {
    sharded_sink sink(dir, layout, {{"format", "pt"}}, 1, 2, true);  // worker 1 of 2: shard 2 only
    sink.write("ccccc", 5);
    sink.commit();
    REQUIRE(sink.files().size() == 1);
    CHECK(sink.files()[0].name == "model-00002-of-00003.safetensors");
    CHECK(sink.files()[0].sha256 == sha256_file(dir + "/model-00002-of-00003.safetensors"));
  }
  CHECK(list_dir(dir) == std::vector<std::string>{"model-00002-of-00003.safetensors"});
  const state_dict sd = load_state_dict(dir + "/model-00002-of-00003.safetensors");
  REQUIRE(sd.tensors.size() == 1);
  CHECK(sd.tensors[0].name == "c");
  CHECK(sd.metadata.at("format") == "pt");
  {
    sharded_sink sink(dir, layout, {}, 0, 2, true);  // shards 1 and 3
    sink.write("aaa", 3);
    CHECK_THROWS(sink.commit());  // not all written
  }
  {
    sharded_sink sink(dir, layout, {}, 0, 2, true);
    sink.write("aaaaaadd", 8);
    CHECK_THROWS(sink.write("x", 1));  // more than its shards hold
    sink.commit();
    CHECK(sink.files().size() == 2);
  }
  CHECK(list_dir(dir).size() == 3);
  remove_tree(dir);
}

TEST_CASE("a layout of diffusers' names, through the plan", "[sharded_output]") {
  const hf_folder_writer diffusers(
      hf_writer_options{"out", output_format::safetensors, 4, weights_naming(weights_names::diffusers), ""});
  auto layout = diffusers.plan({spec("a", 4), spec("b", 4)}, {});
  REQUIRE(layout.shards.size() == 2);
  CHECK(layout.shards[0].file == "diffusion_pytorch_model-00001-of-00002.safetensors");
  CHECK(layout.index_name == "diffusion_pytorch_model.safetensors.index.json");
  CHECK(plan_layout(output_format::torch, {spec("a", 4)}, 8, weights_names::peft).shards.at(0).file ==
        "adapter_model.bin");
  // The plan records the index by its name and bytes, which finalize writes as they are.
  const std::string text = plan_json(layout, {}, {}, 2);
  CHECK(parse_plan(text, "plan").layout.index_name == layout.index_name);
  CHECK(parse_plan(text, "plan").layout.index_bytes == layout.index_bytes);
  // One shard: no index, and the plan says nothing of one.
  const std::string plain = plan_json(diffusers.plan({spec("a", 4)}, {}), {}, {}, 1);
  CHECK(plain.find("\"index\"") == std::string::npos);
  CHECK_FALSE(parse_plan(plain, "plan").layout.indexed());
  // A variant's layout: its files' and its index's names.
  const hf_folder_writer fp16_writer(
      hf_writer_options{"out", output_format::safetensors, 4, weights_naming(weights_names::diffusers, "fp16"), ""});
  const shard_layout fp16 = fp16_writer.plan({spec("a", 4), spec("b", 4)}, {});
  CHECK(fp16.shards[0].file == "diffusion_pytorch_model.fp16-00001-of-00002.safetensors");
  CHECK(fp16.index_name == "diffusion_pytorch_model.safetensors.index.fp16.json");
  // An index name that is not a plain file name of the folder is refused (finalize writes it there).
  const std::string name = "\"diffusion_pytorch_model.safetensors.index.json\"";
  for (const char* bad : {"\"\"", "\"../index.json\"", "\"a/b.json\"", "\".\"", "\"..\"", "\"swavg-plan.json\"",
                          "\"diffusion_pytorch_model-00001-of-00002.safetensors\""}) {
    std::string hostile = text;
    hostile.replace(hostile.find(name), name.size(), bad);
    CHECK_THROWS_AS(parse_plan(hostile, "plan"), input_error);
  }
  std::string not_hex = text;
  not_hex.replace(not_hex.find("\"bytes\": \"") + 10, 1, "g");
  CHECK_THROWS_WITH(parse_plan(not_hex, "plan"), Catch::Contains("not hex"));
}

TEST_CASE("output_folder's steps out of order are internal errors, never a null dereference", "[sharded_output]") {
  const std::string dir = "steps_case";
  remove_tree(dir);
  output_folder out(dir + "/", 0, 1, false);
  const auto code_of = [](const std::function<void()>& f) {
    exit_code code = exit_code::ok;
    const std::string message = test::error_of(f, &code);
    CAPTURE(message);
    CHECK(message.find("output_folder::") != std::string::npos);
    return code;
  };
  CHECK(code_of([&] { out.plan_shards({spec("a", 4)}, {}); }) == exit_code::internal);  // no format yet
  CHECK(code_of([&] { out.open({spec("a", 4)}, {}); }) == exit_code::internal);         // not staged
  CHECK(code_of([&] { out.finish(); }) == exit_code::internal);                         // not open
  out.use(std::make_unique<hf_folder_writer>(hf_writer_options{dir, output_format::safetensors, 100, {}, ""}));
  CHECK(code_of([&] { out.open({spec("a", 4)}, {}); }) == exit_code::internal);  // still not staged
  out.stage("", {});
  CHECK(code_of([&] { out.stage("", {}); }) == exit_code::internal);  // twice
  output_sink& sink = out.open({spec("a", 4)}, {});
  CHECK(code_of([&] { out.open({spec("a", 4)}, {}); }) == exit_code::internal);  // twice
  const char bytes[4] = {1, 2, 3, 4};
  sink.write(bytes, 4);
  sink.commit();
  out.finish();
  CHECK(list_dir(dir) == std::vector<std::string>{"model.safetensors"});
  CHECK(code_of([&] { out.finish(); }) == exit_code::internal);  // twice
  remove_tree(dir);
}

TEST_CASE("hf_folder_writer: at most kMaxShards shards, at the edge", "[sharded_output]") {
  const hf_folder_writer writer(hf_writer_options{"out", output_format::safetensors, 1, {}, ""});
  std::vector<tensor_spec> specs;
  for (size_t i = 0; i < kMaxShards; ++i) specs.push_back(spec("t" + std::to_string(i), 1));
  CHECK(writer.plan(specs, {}).shards.size() == kMaxShards);  // the last valid count
  specs.push_back(spec("one.more", 1));
  CHECK_THROWS_WITH(writer.plan(specs, {}), Catch::Contains("makes 100000 shards, more than the 99999"));
}
