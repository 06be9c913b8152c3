// The Hugging Face shard layout: greedy packing, shard and index names, --max-shard-size, the index bytes.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "formats/hf/hf_index.h"
#include "formats/hf/shard_layout.h"
#include "support.h"
#include "util/error.h"

using namespace swavg;

namespace {

using shards = std::vector<std::vector<size_t>>;

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

}  // namespace

TEST_CASE("greedy packing at the limit's edges", "[shard_layout]") {
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

TEST_CASE("layout: names, the single-file case and total_size", "[shard_layout]") {
  const auto one = plan_layout(output_format::safetensors, {test::byte_spec("a", 4), test::byte_spec("b", 4)}, 100);
  REQUIRE(one.shards.size() == 1);
  CHECK(one.shards[0].file == "model.safetensors");
  CHECK_FALSE(one.indexed());
  CHECK(plan_layout(output_format::torch, {test::byte_spec("a", 4)}, 100).shards[0].file == "pytorch_model.bin");
  const auto three =
      plan_layout(output_format::torch, {test::byte_spec("a", 4), test::byte_spec("b", 4), test::byte_spec("c", 4)}, 4);
  REQUIRE(three.shards.size() == 3);
  CHECK(three.shards[2].file == "pytorch_model-00003-of-00003.bin");
  CHECK(three.total_size == 12);
  CHECK(output_index_name(output_format::torch) == std::string("pytorch_model.bin.index.json"));
  // A float32 tensor counts 4 bytes an element.
  const auto f32 = plan_layout(output_format::safetensors, {tensor_spec{"w", dtype::float32, {2, 3}, {}}}, 100);
  CHECK(f32.total_size == 24);
}

TEST_CASE("shard names past 99999 shards", "[shard_layout]") {
  CHECK(shard_file_name(file_format::safetensors, 1, 99999) == "model-00001-of-99999.safetensors");
  CHECK(shard_file_name(file_format::safetensors, 7, 100000) == "model-00007-of-100000.safetensors");
  CHECK(shard_file_name(file_format::torch, 100000, 100000) == "pytorch_model-100000-of-100000.bin");
  std::vector<uint64_t> sizes(100000, 1);
  CHECK(pack_shards(sizes, 1).size() == 100000);
}

TEST_CASE("shard size option: units, last valid and first invalid", "[shard_layout]") {
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

TEST_CASE("the index is byte for byte what Python's json.dumps writes", "[shard_layout]") {
  auto layout =
      plan_layout(output_format::safetensors,
                  {test::byte_spec("z.weight", 10), test::byte_spec("a.bias", 3), test::byte_spec("caf\xc3\xa9", 5),
                   test::byte_spec("m\"q\\x\n", 9), test::byte_spec("del\x7f/\xf0\x9f\x98\x80", 1)},
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
