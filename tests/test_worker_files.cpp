// The worker protocol's files: plans and manifests round trip and are bounded, job names are reserved.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fmt/format.h>

#include <string>
#include <vector>

#include "formats/hf/hf_index.h"
#include "formats/hf/sharded_output.h"
#include "formats/io/worker_files.h"
#include "support.h"
#include "util/atomic_dir.h"
#include "util/error.h"
#include "util/sha256.h"

using namespace swavg;

TEST_CASE("plan and manifest round trips, and malformed ones", "[worker_files]") {
  const hf_folder_writer writer(hf_writer_options{"out", output_format::torch, 8, {}, ""});
  auto layout = writer.plan({test::byte_spec("a", 4), test::byte_spec("b", 4), test::byte_spec("c", 4)}, {});
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

TEST_CASE("plans and manifests: bounds at their edges, missing fields, options", "[worker_files]") {
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

  auto layout = plan_layout(output_format::torch, {test::byte_spec("a", 4)}, 8);
  const std::string text = plan_json(layout, {}, {}, 2, {{"--weights", "1,3"}, {"--int", "latest"}});
  CHECK(text.find("\"--weights\": \"1,3\"") != std::string::npos);
  CHECK(parse_plan(text, "plan").workers == 2);
  CHECK(text != plan_json(layout, {}, {}, 2, {{"--weights", "3,1"}, {"--int", "latest"}}));
}

TEST_CASE("job file names are reserved", "[worker_files]") {
  for (const char* name : {"swavg-plan.json", "swavg-worker-0-of-2.json", "swavg-worker-.json",
                           "out.swavg-finalize.json", "x.swavg-tmp-1"})
    CHECK(is_job_file_name(name));
  for (const char* name : {"config.json", "swavg-plan.json.bak", "my-swavg-plan.json", "swavg-worker.txt"})
    CHECK_FALSE(is_job_file_name(name));
}

TEST_CASE("a second plan names the first option that differs", "[worker_files]") {
  const std::string dir = "plan_once_case";
  remove_tree(dir);
  ::mkdir(dir.c_str(), 0755);
  auto layout = plan_layout(output_format::torch, {test::byte_spec("a", 4)}, 8);
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

TEST_CASE("worker ownership: shard k belongs to worker (k-1) mod N", "[worker_files]") {
  CHECK(worker_owns(0, 0, 4));
  CHECK(worker_owns(5, 1, 4));
  CHECK_FALSE(worker_owns(5, 2, 4));
  CHECK(worker_owns(7, 0, 1));
}

TEST_CASE("a layout of diffusers' names, through the plan", "[worker_files]") {
  const hf_folder_writer diffusers(
      hf_writer_options{"out", output_format::safetensors, 4, weights_naming(weights_names::diffusers), ""});
  auto layout = diffusers.plan({test::byte_spec("a", 4), test::byte_spec("b", 4)}, {});
  REQUIRE(layout.shards.size() == 2);
  CHECK(layout.shards[0].file == "diffusion_pytorch_model-00001-of-00002.safetensors");
  CHECK(layout.index_name == "diffusion_pytorch_model.safetensors.index.json");
  CHECK(plan_layout(output_format::torch, {test::byte_spec("a", 4)}, 8, weights_names::peft).shards.at(0).file ==
        "adapter_model.bin");
  // The plan records the index by its name and bytes, which finalize writes as they are.
  const std::string text = plan_json(layout, {}, {}, 2);
  CHECK(parse_plan(text, "plan").layout.index_name == layout.index_name);
  CHECK(parse_plan(text, "plan").layout.index_bytes == layout.index_bytes);
  // One shard: no index, and the plan says nothing of one.
  const std::string plain = plan_json(diffusers.plan({test::byte_spec("a", 4)}, {}), {}, {}, 1);
  CHECK(plain.find("\"index\"") == std::string::npos);
  CHECK_FALSE(parse_plan(plain, "plan").layout.indexed());
  // A variant's layout: its files' and its index's names.
  const hf_folder_writer fp16_writer(
      hf_writer_options{"out", output_format::safetensors, 4, weights_naming(weights_names::diffusers, "fp16"), ""});
  const shard_layout fp16 = fp16_writer.plan({test::byte_spec("a", 4), test::byte_spec("b", 4)}, {});
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
