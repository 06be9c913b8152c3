// The Hugging Face folder writer: its sink writes only a worker's shards, and its plan is bounded.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <string>
#include <vector>

#include "formats/hf/shard_layout.h"
#include "formats/hf/sharded_output.h"
#include "formats/safetensors/safetensors.h"
#include "support.h"
#include "util/atomic_dir.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/sha256.h"

using namespace swavg;

TEST_CASE("the sharded sink writes only this worker's shards, each complete", "[sharded_output]") {
  const std::string dir = "sink_case";
  remove_tree(dir);
  ::mkdir(dir.c_str(), 0755);
  const auto layout = plan_layout(
      output_format::safetensors,
      {test::byte_spec("a", 6), test::byte_spec("b", 0), test::byte_spec("c", 5), test::byte_spec("d", 2)}, 6);
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
  const safetensors_content sd = read_safetensors(mapped_file::open(dir + "/model-00002-of-00003.safetensors"));
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

TEST_CASE("hf_folder_writer: at most kMaxShards shards, at the edge", "[sharded_output]") {
  const hf_folder_writer writer(hf_writer_options{"out", output_format::safetensors, 1, {}, ""});
  std::vector<tensor_spec> specs;
  for (size_t i = 0; i < kMaxShards; ++i) specs.push_back(test::byte_spec("t" + std::to_string(i), 1));
  CHECK(writer.plan(specs, {}).shards.size() == kMaxShards);  // the last valid count
  specs.push_back(test::byte_spec("one.more", 1));
  CHECK_THROWS_WITH(writer.plan(specs, {}), Catch::Contains("makes 100000 shards, more than the 99999"));
}
