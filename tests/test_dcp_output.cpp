// DCP output (formats/dcp/dcp_output.h) read back by swavg's own DCP reader: chunks split along dim 1
// over two rank files, two chunks of one tensor in one file (the tensor held, written in two
// passes), bytes arriving one at a time, empty and 0-dim tensors, the archive sizes planned against
// what zip_writer writes, the worker split and a shape that disagrees with the first input.
#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <sys/stat.h>

#include <string>

#include "formats/dcp/dcp_input.h"
#include "formats/dcp/dcp_output.h"
#include "formats/file/save.h"
#include "formats/io/worker_files.h"
#include "support.h"
#include "util/error.h"

using namespace swavg;

namespace {

dcp_entry entry(const std::string& fqn, std::vector<int64_t> size,
                std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::string>> chunks) {
  dcp_entry e;
  e.fqn = fqn;
  e.is_tensor = true;
  e.type = dtype::float32;
  e.size = std::move(size);
  for (auto& [offsets, sizes, file] : chunks) {
    dcp_chunk c;
    c.offsets = offsets;
    c.sizes = sizes;
    c.storage.relative_path = file;
    e.chunks.push_back(c);
  }
  return e;
}

// w: Shard(1) over two files; v: two chunks in __0_0; e: an empty tensor; s: 0-dim.
dcp_chunk_source source() {
  dcp_chunk_source s;
  s.path = "first/.metadata";
  s.key = "model";
  s.metadata.entries.push_back(
      entry("model.w", {4, 6}, {{{0, 0}, {4, 3}, "__0_0.distcp"}, {{0, 3}, {4, 3}, "__1_0.distcp"}}));
  s.metadata.entries.push_back(entry("model.v", {5}, {{{0}, {2}, "__0_0.distcp"}, {{2}, {3}, "__0_0.distcp"}}));
  s.metadata.entries.push_back(entry("model.e", {2, 0}, {{{0, 0}, {2, 0}, "__1_0.distcp"}}));
  s.metadata.entries.push_back(entry("model.s", {}, {{{}, {}, "__1_0.distcp"}}));
  return s;
}

std::vector<tensor_spec> specs() {
  return {{"w", dtype::float32, {4, 6}, std::nullopt},
          {"v", dtype::float32, {5}, std::nullopt},
          {"e", dtype::float32, {2, 0}, std::nullopt},
          {"s", dtype::float32, {}, std::nullopt},
          {"extra", dtype::bfloat16, {3}, std::nullopt}};
}

std::vector<float> values(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + static_cast<float>(i);
  return v;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

TEST_CASE("dcp_output: chunked like the first input, read back by swavg's DCP reader", "[dcp_output]") {
  const bool byte_by_byte = GENERATE(false, true);
  test::temp_dir dir;
  const dcp_chunk_source like = source();
  const dcp_plan plan = plan_dcp(specs(), &like, dir.path());
  REQUIRE(plan.files == std::vector<std::string>{"__0_0.distcp", "__1_0.distcp"});
  CHECK(plan.tensors[0].fqn == "model.w");
  CHECK(plan.tensors[1].passes == 2);
  CHECK(plan.tensors[4].fqn == "model.extra");  // not in the first input: one chunk in __0_0
  REQUIRE(plan.tensors[4].chunks.size() == 1);
  CHECK(plan.tensors[4].chunks[0].file == 0);
  CHECK(plan.layout.shards[1].specs == std::vector<size_t>{0, 2, 3});
  CHECK(plan.layout.total_size == (24 + 5 + 1) * 4 + 3 * 2);

  const std::vector<float> w = values(24, 0), v = values(5, 100), s = {7.5f};
  const uint16_t extra[3] = {0x3f80, 0x4000, 0x4040};  // bfloat16 1, 2, 3
  {
    dcp_sink sink(dir.path(), plan, 0, 1, false);
    auto put = [&](const void* data, size_t n) {
      const char* p = static_cast<const char*>(data);
      if (!byte_by_byte) return sink.write(p, n);
      for (size_t i = 0; i < n; ++i) sink.write(p + i, 1);
    };
    put(w.data(), w.size() * 4);
    put(v.data(), v.size() * 4);
    put(s.data(), 4);
    put(extra, sizeof extra);
    sink.commit();
    REQUIRE(sink.files().size() == 2);
    CHECK(sink.bytes_written() == sink.files()[0].size + sink.files()[1].size);
  }
  write_index(dir.path(), plan.layout);
  for (size_t f = 0; f < 2; ++f) {
    uint64_t end = 0;
    for (const auto& t : plan.tensors)
      for (const auto& c : t.chunks)
        if (c.file == f) end = std::max(end, c.offset + c.length);
    CHECK(file_size(dir / plan.files[f]) == end);
  }

  const state_dict sd = read_dcp_folder(dir.path(), "model");
  REQUIRE(sd.tensors.size() == 5);
  auto bytes_of = [&](const std::string& name) {
    for (const auto& t : sd.tensors)
      if (t.name == name) return test::row_major_bytes(t.view);
    FAIL("no tensor " << name);
    return std::string();
  };
  CHECK(bytes_of("w") == std::string(reinterpret_cast<const char*>(w.data()), 96));
  CHECK(bytes_of("v") == std::string(reinterpret_cast<const char*>(v.data()), 20));
  CHECK(bytes_of("e").empty());
  CHECK(bytes_of("s") == std::string(reinterpret_cast<const char*>(s.data()), 4));
  CHECK(bytes_of("extra") == std::string(reinterpret_cast<const char*>(extra), 6));
}

TEST_CASE("dcp_output: planned archive sizes are what zip_writer writes", "[dcp_output]") {
  // 64-byte alignment edges of the data record and of the pickle
  const int64_t n = GENERATE(0, 1, 15, 16, 17, 1000);
  test::temp_dir dir;
  const dcp_plan plan = plan_dcp({{"t", dtype::float32, {n}, std::nullopt}}, nullptr, dir.path());
  REQUIRE(plan.files == std::vector<std::string>{kDcpSingleFile});
  const dcp_out_chunk& c = plan.tensors[0].chunks[0];
  CHECK(c.length == dcp_chunk_archive_size(static_cast<uint64_t>(n) * 4, dcp_chunk_pickle(dtype::float32, {n}).size()));
  const std::vector<float> data = values(static_cast<size_t>(n), 1);
  dcp_sink sink(dir.path(), plan, 0, 1, true);
  sink.write(data.data(), data.size() * 4);
  sink.commit();
  CHECK(file_size(dir / kDcpSingleFile) == c.length);
  CHECK(sink.files()[0].sha256.size() == 64);
}

TEST_CASE("dcp_output: workers own the rank files k mod N and the tensors with a chunk in them", "[dcp_output]") {
  test::temp_dir dir;
  const dcp_chunk_source like = source();
  const dcp_plan plan = plan_dcp(specs(), &like, dir.path());
  dcp_sink first(dir.path(), plan, 0, 2, true), second(dir.path(), plan, 1, 2, true);
  CHECK((first.owns(0) && first.owns(1) && !first.owns(2) && !first.owns(3) && first.owns(4)));
  CHECK((second.owns(0) && !second.owns(1) && second.owns(2) && second.owns(3) && !second.owns(4)));
  CHECK_THROWS_AS(second.commit(), error);  // nothing written yet
}

TEST_CASE("dcp_output: a tensor whose shape is not the first input's is refused, naming it", "[dcp_output]") {
  const dcp_chunk_source like = source();
  exit_code code{};
  const std::string message = test::error_of(
      [&] {
        plan_dcp({{"w", dtype::float32, {4, 7}, std::nullopt}}, &like, "out");
      },
      &code);
  CHECK(code == exit_code::mismatch);
  CHECK(message.find("first/.metadata: tensor 'model.w' is [4, 6]") != std::string::npos);
}

TEST_CASE("dcp_output: --format dcp refuses a file output", "[dcp_output]") {
  exit_code code{};
  const std::string message = test::error_of([] { refuse_folder_format("avg.pt", output_format::dcp); }, &code);
  CHECK(code == exit_code::usage);
  CHECK(message.find("-o avg.pt/") != std::string::npos);
  CHECK(test::error_of([] { refuse_folder_format("avg.pt", output_format::torch); }).empty());
}

TEST_CASE("dcp_output: at most kMaxShards rank files, at the edge", "[dcp_output]") {
  // A first input whose tensor lies in n one-element chunks, each in its own rank file.
  auto like_with_files = [](int64_t n) {
    dcp_chunk_source s;
    s.path = "first/.metadata";
    s.key = "model";
    std::vector<std::tuple<std::vector<int64_t>, std::vector<int64_t>, std::string>> chunks;
    for (int64_t i = 0; i < n; ++i) chunks.push_back({{i}, {1}, fmt::format("__{}_0.distcp", i)});
    s.metadata.entries.push_back(entry("model.w", {n}, chunks));
    return s;
  };
  const auto last_valid = static_cast<int64_t>(kMaxShards);
  const dcp_chunk_source fits = like_with_files(last_valid);
  CHECK(plan_dcp({{"w", dtype::float32, {last_valid}, std::nullopt}}, &fits, "out").files.size() == kMaxShards);

  const dcp_chunk_source too_many = like_with_files(last_valid + 1);
  exit_code code{};
  const std::string message = test::error_of(
      [&] {
        plan_dcp({{"w", dtype::float32, {last_valid + 1}, std::nullopt}}, &too_many, "out");
      },
      &code);
  CHECK(code == exit_code::usage);
  CHECK(message.find("out/: the DCP output would have 100000 rank files (chunked like first/.metadata), more than the "
                     "99999") != std::string::npos);
}

TEST_CASE("dcp_output: rank files never take a name the output reserves", "[dcp_output]") {
  CHECK(is_reserved_dcp_name(".metadata"));
  CHECK(is_reserved_dcp_name(kPlanName));
  CHECK(is_reserved_dcp_name(manifest_name(0, 2)));
  CHECK_FALSE(is_reserved_dcp_name("__0_0.distcp"));
  CHECK_FALSE(is_reserved_dcp_name(".metadata2"));
  // a one-process folder whose chunks lie in .metadata itself; another file already takes __0_0
  dcp_chunk_source s;
  s.path = "first/.metadata";
  s.metadata.entries.push_back(entry("a", {4}, {{{0}, {2}, ".metadata"}, {{2}, {2}, "__0_0.distcp"}}));
  s.metadata.entries.push_back(entry("b", {3}, {{{0}, {3}, kPlanName}}));
  s.metadata.entries.push_back(entry("c", {3}, {{{0}, {3}, ".metadata"}}));
  const dcp_plan plan = plan_dcp({{"a", dtype::float32, {4}, std::nullopt},
                                  {"b", dtype::float32, {3}, std::nullopt},
                                  {"c", dtype::float32, {3}, std::nullopt},
                                  {"d", dtype::float32, {1}, std::nullopt}},
                                 &s, "out");
  CHECK(plan.files == std::vector<std::string>{"__1_0.distcp", "__0_0.distcp", "__2_0.distcp"});
  CHECK(plan.tensors[2].chunks[0].file == 0);  // .metadata's other chunk: the same renamed file
  CHECK(plan.tensors[3].chunks[0].file == 1);  // a tensor not in the first input: __0_0.distcp
}

TEST_CASE("dcp_output: planner_data keeps ints as ints, the record rides in .metadata", "[dcp_output]") {
  dcp_chunk_source s;
  s.path = "first/.metadata";
  s.key = "model";
  dcp_entry e = entry("model.blocks.0.w", {2}, {{{0}, {2}, "__0_0.distcp"}});
  e.path = {{"model"}, {"blocks"}, {"0", true, 0}, {"w"}};
  s.metadata.entries.push_back(e);
  test::temp_dir dir;
  const dcp_plan plan =
      plan_dcp({{"blocks.0.w", dtype::float32, {2}, std::nullopt}}, &s, dir.path(), {{"swavg", "{\"n\": 2}"}});
  write_index(dir.path(), plan.layout);
  const dcp_metadata back = read_dcp_metadata(dir.path());
  REQUIRE(back.entries.size() == 1);
  CHECK(back.entries[0].path == e.path);
  CHECK(back.entries[0].path[2].integer);
  CHECK(back.swavg == std::map<std::string, std::string>{{"swavg", "{\"n\": 2}"}});
}
