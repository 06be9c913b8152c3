// DCP .metadata (formats/dcp/dcp_metadata.h): torch's own files against what torch reads from them,
// hand-made pickles as data (the allow list, malformed fields), and chunk tilings at their edges.
#include <catch2/catch.hpp>

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

#include "formats/dcp/dcp_metadata.h"
#include "support.h"
#include "util/error.h"
#include "util/mapped_file.h"

using namespace swavg;

namespace {

const std::string kMeta = "torch.distributed.checkpoint.metadata";

std::string global(const std::string& module, const std::string& name) { return "c" + module + "\n" + name + "\n"; }

std::string str(const std::string& s) {
  std::string out = "X";
  const auto n = static_cast<uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) out += static_cast<char>((n >> (8 * i)) & 0xff);
  return out + s;
}

std::string integer(int32_t v) {
  std::string out = "J";
  const auto u = static_cast<uint32_t>(v);
  for (int i = 0; i < 4; ++i) out += static_cast<char>((u >> (8 * i)) & 0xff);
  return out;
}

// cls() with BUILD(fields), as pickle writes a dataclass.
std::string object(const std::string& module, const std::string& cls, const std::string& fields) {
  return global(module, cls) + ")\x81}(" + fields + "ub";
}

std::string torch_size(const std::vector<int32_t>& dims) {
  std::string s = global("torch", "Size") + "((";
  for (int32_t d : dims) s += integer(d);
  return s + "ttR";
}

struct spec {
  std::string dtype = "float32";
  std::vector<int32_t> size{2, 3};
  std::vector<std::vector<int32_t>> offsets{{0, 0}};
  std::vector<std::vector<int32_t>> sizes{{2, 3}};
  std::string relative_path = "__0_0.distcp";
  int32_t offset = 0;
  int32_t length = 100;
  std::string extra_field;     // appended to Metadata's fields
  std::string storage_extra;   // appended to each _StorageInfo's fields
  bool storage_twice = false;  // storage_data lists the first chunk's entry twice
};

std::string metadata_pickle(const spec& s) {
  const std::string props = global(kMeta, "TensorProperties") + ")\x81(" + global("torch", s.dtype) + "N\x89N\x89tb";
  std::string chunks = "](";
  std::string storage = "}(";
  for (size_t i = 0; i < s.offsets.size(); ++i) {
    chunks += object(kMeta, "ChunkStorageMetadata",
                     str("offsets") + torch_size(s.offsets[i]) + str("sizes") + torch_size(s.sizes[i]));
    const std::string entry =
        object(kMeta, "MetadataIndex", str("fqn") + str("w") + str("offset") + torch_size(s.offsets[i])) +
        object("torch.distributed.checkpoint.filesystem", "_StorageInfo",
               str("relative_path") + str(s.relative_path) + str("offset") + integer(s.offset) + str("length") +
                   integer(s.length) + s.storage_extra);
    storage += entry;
    if (s.storage_twice && i == 0) storage += entry;
  }
  chunks += "e";
  storage += "u";
  const std::string tensor =
      object(kMeta, "TensorStorageMetadata",
             str("properties") + props + str("size") + torch_size(s.size) + str("chunks") + chunks);
  const std::string fields =
      str("state_dict_metadata") + "}(" + str("w") + tensor + "u" + str("storage_data") + storage + s.extra_field;
  return "\x80\x02" + object(kMeta, "Metadata", fields) + ".";
}

dcp_metadata parse(const std::string& bytes) {
  return parse_dcp_metadata(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "ckpt/.metadata");
}

dcp_chunk chunk(std::vector<int64_t> offsets, std::vector<int64_t> sizes) {
  dcp_chunk c;
  c.offsets = std::move(offsets);
  c.sizes = std::move(sizes);
  return c;
}

}  // namespace

TEST_CASE("a hand-made .metadata of one tensor in one chunk", "[dcp_metadata]") {
  const dcp_metadata md = parse(metadata_pickle(spec{}));
  REQUIRE(md.entries.size() == 1);
  const dcp_entry& e = md.entries[0];
  CHECK(e.fqn == "w");
  CHECK(e.is_tensor);
  CHECK(e.type == dtype::float32);
  CHECK(e.size == std::vector<int64_t>{2, 3});
  REQUIRE(e.chunks.size() == 1);
  CHECK(e.chunks[0].storage.relative_path == "__0_0.distcp");
  CHECK(e.chunks[0].storage.length == 100);
}

TEST_CASE("globals off the allow list are refused, nothing run", "[dcp_metadata]") {
  spec s;
  s.extra_field = str("planner_data") + global("posix", "system") + "(" + str("touch /tmp/x") + "tR";
  CHECK_THROWS_WITH(parse(metadata_pickle(s)), Catch::Contains("'posix.system'") && Catch::Contains("allow list"));
  s.extra_field = str("planner_data") + global("argparse", "Namespace") + ")\x81";
  CHECK_THROWS_AS(parse(metadata_pickle(s)), input_error);
  // getattr only as DCP uses it, on the memory-format enum
  s.extra_field = str("planner_data") + global("builtins", "getattr") + "(" + global("os", "path") + str("x") + "tR";
  CHECK_THROWS_WITH(parse(metadata_pickle(s)), Catch::Contains("'os.path'"));  // named: off the list itself
  s.extra_field = str("planner_data") + global("builtins", "getattr") + "(" + global(kMeta, "_MEM_FORMAT_ENCODING") +
                  str("TORCH_CONTIGUOUS_FORMAT") + "tR";
  CHECK_NOTHROW(parse(metadata_pickle(s)));
  s.extra_field =
      str("planner_data") + global("builtins", "getattr") + "(" + global(kMeta, "Metadata") + str("x") + "tR";
  CHECK_THROWS_WITH(parse(metadata_pickle(s)), Catch::Contains("other than _MEM_FORMAT_ENCODING"));
}

TEST_CASE("every global the pickle names is checked, whether the root reaches it or not", "[dcp_metadata]") {
  spec s;
  // os.system called, its result popped, before planner_data's real (empty) value: pickle.load
  // would run it, so it is refused like a reachable one (exit 3).
  s.extra_field = str("planner_data") + global("posix", "system") + "(" + str("touch /tmp/x") + "tR0}";
  CHECK_THROWS_WITH(parse(metadata_pickle(s)), Catch::Contains("'posix.system'") && Catch::Contains("allow list"));
  try {
    parse(metadata_pickle(s));
  } catch (const error& e) {
    CHECK(e.code() == exit_code::bad_input);
  }
  // named and popped without a call
  s.extra_field = str("planner_data") + global("os", "system") + "0}";
  CHECK_THROWS_WITH(parse(metadata_pickle(s)), Catch::Contains("'os.system'"));
  // an allowed global called as DCP never calls it, the result popped
  s.extra_field =
      str("planner_data") + global("builtins", "getattr") + "(" + global(kMeta, "Metadata") + str("x") + "tR0}";
  CHECK_THROWS_WITH(parse(metadata_pickle(s)), Catch::Contains("other than _MEM_FORMAT_ENCODING"));
  // the same popped values built only of allowed globals are accepted
  s.extra_field = str("planner_data") + global("torch", "Size") + "(" + integer(1) + "tR0}";
  CHECK_NOTHROW(parse(metadata_pickle(s)));
}

TEST_CASE("chunks written through storage extensions are refused", "[dcp_metadata]") {
  spec s;
  s.storage_extra = str("transform_descriptors") + "]" + str("zstd") + "a";
  CHECK_THROWS_WITH(parse(metadata_pickle(s)),
                    Catch::Contains("'w'") && Catch::Contains("transform_descriptors") && Catch::Contains("plain"));
  s.storage_extra = str("transform_descriptors") + "N";
  CHECK_NOTHROW(parse(metadata_pickle(s)));
  s.storage_extra = str("transform_descriptors") + "]";
  CHECK_NOTHROW(parse(metadata_pickle(s)));
}

TEST_CASE("a chunk listed twice is refused", "[dcp_metadata]") {
  spec s;
  s.size = {4, 3};
  s.offsets = {{0, 0}, {2, 0}};
  s.sizes = {{2, 3}, {2, 3}};
  CHECK_NOTHROW(parse(metadata_pickle(s)));
  s.storage_twice = true;  // in storage_data
  CHECK_THROWS_WITH(parse(metadata_pickle(s)), Catch::Contains("[0, 0] is listed twice"));
  s = spec{};
  s.size = {4, 3};
  s.offsets = {{0, 0}, {0, 0}, {2, 0}};  // in the tensor's chunks
  s.sizes = {{2, 3}, {2, 3}, {2, 3}};
  s.storage_twice = false;
  CHECK_THROWS_AS(parse(metadata_pickle(s)), input_error);
}

TEST_CASE("malformed fields are input errors naming the entry", "[dcp_metadata]") {
  spec s;
  s.dtype = "qint8";  // a torch dtype swavg does not average (float8 and the unsigned ones are read)
  CHECK_THROWS_WITH(parse(metadata_pickle(s)), Catch::Contains("'w'") && Catch::Contains("torch.qint8"));
  s = spec{};
  s.offset = -1;
  CHECK_THROWS_WITH(parse(metadata_pickle(s)), Catch::Contains("non-negative") && Catch::Contains("-1"));
  s = spec{};
  s.relative_path = "../other/__0_0.distcp";
  CHECK_THROWS_WITH(parse(metadata_pickle(s)), Catch::Contains("not a file name inside"));
  s.relative_path = "..";
  CHECK_THROWS_AS(parse(metadata_pickle(s)), input_error);
  CHECK_THROWS_AS(parse("\x80\x02N."), input_error);                           // not a Metadata
  CHECK_THROWS_AS(parse(metadata_pickle(spec{}).substr(0, 60)), input_error);  // truncated
}

TEST_CASE("chunks are matched to storage entries by their offsets", "[dcp_metadata]") {
  spec s;
  s.size = {4, 3};
  s.offsets = {{0, 0}, {2, 0}};
  s.sizes = {{2, 3}, {2, 3}};
  const dcp_metadata md = parse(metadata_pickle(s));
  REQUIRE(md.entries[0].chunks.size() == 2);
  CHECK(md.entries[0].chunks[1].offsets == std::vector<int64_t>{2, 0});
  s.sizes = {{2, 3}, {1, 3}};  // a hole of one row
  CHECK_THROWS_WITH(parse(metadata_pickle(s)), Catch::Contains("'w'") && Catch::Contains("cover 9 of the 12"));
}

TEST_CASE("chunk tiling at its edges", "[dcp_metadata]") {
  const std::vector<int64_t> size{7, 5};
  // uneven Shard(0) over 4 ranks: 2, 2, 2, 1 rows
  CHECK(check_chunk_tiling(
            size, {chunk({0, 0}, {2, 5}), chunk({2, 0}, {2, 5}), chunk({4, 0}, {2, 5}), chunk({6, 0}, {1, 5})}) == "");
  // the last chunk ends exactly at the tensor's end; one row more is past it
  CHECK(check_chunk_tiling(size, {chunk({0, 0}, {6, 5}), chunk({6, 0}, {1, 5})}) == "");
  CHECK_THAT(check_chunk_tiling(size, {chunk({0, 0}, {6, 5}), chunk({6, 0}, {2, 5})}),
             Catch::Contains("chunk 1") && Catch::Contains("ends at 8 in dimension 0, past the tensor's size 7"));
  // Shard(1): adjacent columns tile, one shared column overlaps
  CHECK(check_chunk_tiling(size, {chunk({0, 0}, {7, 3}), chunk({0, 3}, {7, 2})}) == "");
  CHECK_THAT(check_chunk_tiling(size, {chunk({0, 0}, {7, 3}), chunk({0, 2}, {7, 3})}),
             Catch::Contains("chunk 1 (offsets [0, 2], sizes [7, 3]) overlaps chunk 0"));
  // one row of a column shard missing; one element missing
  CHECK_THAT(check_chunk_tiling(size, {chunk({0, 0}, {7, 3}), chunk({0, 3}, {6, 2})}),
             Catch::Contains("cover 33 of the 35 elements"));
  CHECK_THAT(check_chunk_tiling({7}, {chunk({0}, {3}), chunk({3}, {3})}), Catch::Contains("cover 6 of the 7"));
  // empty chunks (a rank with no rows) overlap nothing
  CHECK(check_chunk_tiling({3}, {chunk({0}, {1}), chunk({1}, {1}), chunk({2}, {1}), chunk({3}, {0})}) == "");
  CHECK_THAT(check_chunk_tiling({3}, {chunk({0}, {1}), chunk({1}, {1}), chunk({2}, {1}), chunk({4}, {0})}),
             Catch::Contains("ends at 4"));
  // a 0-dim tensor: one chunk; two overlap
  CHECK(check_chunk_tiling({}, {chunk({}, {})}) == "");
  CHECK_THAT(check_chunk_tiling({}, {chunk({}, {}), chunk({}, {})}), Catch::Contains("overlaps"));
  CHECK_THAT(check_chunk_tiling({}, {}), Catch::Contains("cover 0 of the 1"));
  CHECK_THAT(check_chunk_tiling(size, {chunk({0}, {7})}), Catch::Contains("has 1 dimensions, the tensor 2"));
}

TEST_CASE("chunk tiling in every dimension", "[dcp_metadata]") {
  // a valid split along dimension 2 only: the chunks meet in dimensions 0 and 1
  CHECK(check_chunk_tiling({2, 3, 4}, {chunk({0, 0, 0}, {2, 3, 2}), chunk({0, 0, 2}, {2, 3, 2})}) == "");
  // overlapping in dimension 2 only
  CHECK_THAT(check_chunk_tiling({2, 3, 4}, {chunk({0, 0, 0}, {2, 3, 3}), chunk({0, 0, 1}, {2, 3, 3})}),
             Catch::Contains("chunk 1 (offsets [0, 0, 1], sizes [2, 3, 3]) overlaps chunk 0"));
  // as many elements as the tensor, one overlap and one gap, in dimension 2
  CHECK_THAT(check_chunk_tiling({1, 1, 4}, {chunk({0, 0, 0}, {1, 1, 2}), chunk({0, 0, 1}, {1, 1, 2})}),
             Catch::Contains("overlaps chunk 0"));
  // a 2 x 2 grid (Shard(0) x Shard(1)), in any order; one cell moved onto another
  const std::vector<dcp_chunk> grid{chunk({2, 2}, {2, 3}), chunk({0, 0}, {2, 2}), chunk({0, 2}, {2, 3}),
                                    chunk({2, 0}, {2, 2})};
  CHECK(check_chunk_tiling({4, 5}, grid) == "");
  std::vector<dcp_chunk> moved = grid;
  moved[3] = chunk({0, 0}, {2, 2});
  CHECK_THAT(check_chunk_tiling({4, 5}, moved),
             Catch::Contains("chunk 3 (offsets [0, 0], sizes [2, 2]) overlaps chunk 1"));
  // a grid cell cut in two along dimension 1 and one of its halves listed twice, the other dropped
  CHECK(check_chunk_tiling({2, 4}, {chunk({0, 0}, {2, 2}), chunk({0, 2}, {2, 1}), chunk({0, 3}, {2, 1})}) == "");
  CHECK_THAT(check_chunk_tiling({2, 4}, {chunk({0, 0}, {2, 2}), chunk({0, 2}, {2, 1}), chunk({0, 2}, {2, 1})}),
             Catch::Contains("chunk 2 (offsets [0, 2], sizes [2, 1]) overlaps chunk 1"));
  CHECK_THAT(check_chunk_tiling({2, 4}, {chunk({0, 0}, {2, 2}), chunk({0, 2}, {2, 1})}),
             Catch::Contains("cover 6 of the 8"));
  // a chunk listed twice where another is missing: the same count of elements
  CHECK_THAT(check_chunk_tiling({1, 3}, {chunk({0, 0}, {1, 1}), chunk({0, 1}, {1, 1}), chunk({0, 1}, {1, 1})}),
             Catch::Contains("chunk 2 (offsets [0, 1], sizes [1, 1]) overlaps chunk 1"));
  // DTensor's uneven split of [1, 7] into column chunks; an L-shaped tiling
  CHECK(check_chunk_tiling({1, 7}, {chunk({0, 0}, {1, 2}), chunk({0, 2}, {1, 2}), chunk({0, 4}, {1, 2}),
                                    chunk({0, 6}, {1, 1})}) == "");
  CHECK(check_chunk_tiling({3, 3}, {chunk({0, 0}, {2, 1}), chunk({2, 0}, {1, 2}), chunk({1, 2}, {2, 1}),
                                    chunk({0, 1}, {1, 2}), chunk({1, 1}, {1, 1})}) == "");
  CHECK_THAT(check_chunk_tiling({3, 3}, {chunk({0, 0}, {2, 1}), chunk({2, 0}, {1, 2}), chunk({1, 2}, {2, 1}),
                                         chunk({0, 1}, {1, 2}), chunk({1, 0}, {1, 1})}),
             Catch::Contains("overlaps"));
}

TEST_CASE("chunk tiling: the corner limit at its edge", "[dcp_metadata]") {
  CHECK(tiling_corner_limit(0) == kMinTilingCorners);
  CHECK(tiling_corner_limit(65536) == kMinTilingCorners);
  CHECK(tiling_corner_limit(65537) == kMinTilingCorners + 16);
  // a 2 x 2 grid of [4, 5]: 4 + 2 + 2 + 1 corners inside the tensor
  const std::vector<dcp_chunk> grid{chunk({0, 0}, {2, 2}), chunk({0, 2}, {2, 3}), chunk({2, 0}, {2, 2}),
                                    chunk({2, 2}, {2, 3})};
  CHECK(check_chunk_tiling({4, 5}, grid, 9) == "");
  CHECK_THAT(check_chunk_tiling({4, 5}, grid, 8), Catch::Contains("takes 9 corners, more than the 8"));
}

TEST_CASE("chunk tiling takes O(n log n) in any dimension", "[dcp_metadata]") {
  // 100,000 column chunks of [1, 100000] (chunks that differ in dimension 1 only), then the same
  // count as rows of [100000, 1] and as a 250 x 400 grid; each in well under a second.
  const int64_t n = 100'000;
  const std::clock_t start = std::clock();
  std::vector<dcp_chunk> cols, rows, grid;
  for (int64_t i = 0; i < n; ++i) {
    cols.push_back(chunk({0, n - 1 - i}, {1, 1}));
    rows.push_back(chunk({i, 0}, {1, 1}));
    grid.push_back(chunk({(i / 400) * 2, (i % 400) * 3}, {2, 3}));
  }
  CHECK(check_chunk_tiling({1, n}, cols) == "");
  CHECK(check_chunk_tiling({n, 1}, rows) == "");
  CHECK(check_chunk_tiling({500, 1200}, grid) == "");
  cols[0] = chunk({0, 0}, {1, 1});  // the first column listed twice, the last one missing
  CHECK_THAT(check_chunk_tiling({1, n}, cols), Catch::Contains("overlaps"));
  // CPU time, not wall time: 80,000 column chunks took 8-20 s when chunks were told apart by their
  // first dimension only
  CHECK(static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC < 3.0);
}

TEST_CASE("torch's own .metadata files read as torch reads them", "[dcp_metadata][fixtures]") {
  for (const char* name : {"run1_0", "rank2_0", "rank4_0", "fsdp2_0"}) {
    const std::string folder = test::fixture(std::string("dcp/") + name);
    const nlohmann::json want = test::read_json(folder + ".json");
    auto f = mapped_file::open(folder + "/.metadata");
    const dcp_metadata md = parse_dcp_metadata(f->data(), f->size(), f->path());
    INFO(name);
    REQUIRE(md.entries.size() == want["entries"].size());
    for (size_t i = 0; i < md.entries.size(); ++i) {
      const dcp_entry& e = md.entries[i];
      const auto& w = want["entries"][i];
      INFO(e.fqn);
      CHECK(e.fqn == w["fqn"].get<std::string>());
      REQUIRE(e.is_tensor == w["tensor"].get<bool>());
      if (!e.is_tensor) continue;
      CHECK(dtype_name(e.type) == w["dtype"].get<std::string>());
      CHECK(e.size == w["size"].get<std::vector<int64_t>>());
      REQUIRE(e.chunks.size() == w["chunks"].size());
      for (size_t c = 0; c < e.chunks.size(); ++c) {
        CHECK(e.chunks[c].offsets == w["chunks"][c]["offsets"].get<std::vector<int64_t>>());
        CHECK(e.chunks[c].sizes == w["chunks"][c]["sizes"].get<std::vector<int64_t>>());
      }
    }
  }
}

TEST_CASE("chunk tiling: a negative offset or size is named as such, wherever it is", "[dcp_metadata]") {
  for (const auto& bad : {chunk({2}, {-1}), chunk({5}, {-2}), chunk({-1}, {2}), chunk({0}, {-4})})
    CHECK_THAT(check_chunk_tiling({4}, {chunk({0}, {4}), bad}),
               Catch::Contains("chunk 1") && Catch::Contains("has a negative offset or size"));
  CHECK_THAT(check_chunk_tiling({2, 3}, {chunk({0, 0}, {2, -3})}), Catch::Contains("has a negative offset or size"));
}

TEST_CASE(
    "chunk tiling: of several overlaps, the first met sweeping the first of the dimensions with the most "
    "starts is named",
    "[dcp_metadata]") {
  // Starts at {0, 2} in each dimension: dimension 0 is swept, which meets chunk 2 on chunk 0 first
  // (sweeping dimension 1 would meet chunk 1 first).
  CHECK(check_chunk_tiling({4, 4}, {chunk({0, 0}, {4, 4}), chunk({2, 0}, {1, 1}), chunk({0, 2}, {1, 1})}) ==
        "chunk 2 (offsets [0, 2], sizes [1, 1]) overlaps chunk 0 (offsets [0, 0], sizes [4, 4])");
  // Three starts in dimension 1, two in dimension 0: dimension 1 is swept.
  CHECK(check_chunk_tiling(
            {4, 4}, {chunk({0, 0}, {4, 4}), chunk({2, 0}, {1, 1}), chunk({0, 2}, {1, 1}), chunk({0, 3}, {1, 1})}) ==
        "chunk 1 (offsets [2, 0], sizes [1, 1]) overlaps chunk 0 (offsets [0, 0], sizes [4, 4])");
}
