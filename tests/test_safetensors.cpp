#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/file/save.h"
#include "formats/safetensors/safetensors.h"
#include "util/atomic_file.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/sha256.h"

using namespace swavg;
using json = nlohmann::json;

namespace {

#ifndef SWAVG_PYTHON
#define SWAVG_PYTHON "/usr/bin/python3"
#endif

const std::string kFixtures = SWAVG_FIXTURES_DIR;
const std::string kBadPath = "bad.safetensors";

std::string source_dir() {
#ifdef SWAVG_SOURCE_DIR
  return SWAVG_SOURCE_DIR;
#else
  std::string file = __FILE__;  // <source>/tests/test_safetensors.cpp
  auto tests = file.rfind("tests/");
  return tests == std::string::npos || tests == 0 ? "." : file.substr(0, tests - 1);
#endif
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

// A file with this header text (unpadded) and `data_len` data bytes.
std::string st_bytes(const std::string& header, size_t data_len) {
  return le64(header.size()) + header + std::string(data_len, '\x5a');
}

std::string entry(const std::string& dtype, const std::string& shape, uint64_t begin, uint64_t end) {
  return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":[)" + std::to_string(begin) + "," +
         std::to_string(end) + "]}";
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE(in.good());
  return json::parse(in);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct temp_dir {
  std::string path;
  temp_dir() {
    char tmpl[] = "/tmp/swavg_st_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~temp_dir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

int run_python_check(const std::string& file, const std::string& manifest, bool quiet = false) {
  const std::string cmd = std::string(SWAVG_PYTHON) + " '" + source_dir() + "/tests/cli/safetensors_ref.py' check '" +
                          file + "' '" + manifest + "'" + (quiet ? " 2>/dev/null" : "");
  int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void compare_with_manifest(const safetensors_content& c, const json& manifest) {
  const auto& want = manifest["tensors"];
  REQUIRE(c.tensors.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& t = c.tensors[i];
    INFO(t.name);
    CHECK(t.name == want[i]["name"].get<std::string>());
    CHECK(dtype_name(t.view.type) == want[i]["dtype"].get<std::string>());
    CHECK(t.view.shape == want[i]["shape"].get<std::vector<int64_t>>());
    CHECK(t.view.strides == contiguous_strides(t.view.shape));
    CHECK(t.view.offset == 0);
    CHECK(t.view.storage_key == t.name);
    CHECK(t.view.storage_bytes == t.view.nbytes());
    CHECK(t.view.is_contiguous());
    CHECK(sha256_hex(t.view.data(), t.view.nbytes()) == want[i]["sha256"].get<std::string>());
  }
}

}  // namespace

TEST_CASE("sha256 helper matches known digests", "[safetensors]") {
  CHECK(sha256_hex(nullptr, 0) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const std::string abc = "abc";
  CHECK(sha256_hex(reinterpret_cast<const uint8_t*>(abc.data()), 3) ==
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("reads a file written by the spec-following Python writer", "[safetensors][fixtures]") {
  auto file = mapped_file::open(kFixtures + "/st_mixed.safetensors");
  auto content = read_safetensors(file);
  auto manifest = read_json(kFixtures + "/st_mixed.json");
  compare_with_manifest(content, manifest);
  CHECK(content.metadata == manifest["metadata"].get<std::map<std::string, std::string>>());
  for (const auto& t : content.tensors) {
    CHECK(t.view.owner.get() == static_cast<const void*>(file.get()));
    CHECK(t.view.storage >= file->data());
    CHECK(t.view.storage + t.view.storage_bytes <= file->data() + file->size());
  }
  const auto& scalar = content.tensors[10];
  CHECK(scalar.name == "scalar");
  CHECK(scalar.view.shape.empty());
  CHECK(scalar.view.numel() == 1);
  float value;
  std::memcpy(&value, scalar.view.data(), 4);
  CHECK(value == 3.5f);
}

TEST_CASE("returns tensors in order of data offset, not header order", "[safetensors][fixtures]") {
  auto content = read_safetensors(mapped_file::open(kFixtures + "/st_shuffled.safetensors"));
  compare_with_manifest(content, read_json(kFixtures + "/st_shuffled.json"));
  CHECK(content.metadata.empty());
}

TEST_CASE("reads a file without tensors", "[safetensors][fixtures]") {
  auto content = read_safetensors(mapped_file::open(kFixtures + "/st_empty.safetensors"));
  CHECK(content.tensors.empty());
  CHECK(content.metadata.empty());
}

TEST_CASE("accepts what the reference accepts", "[safetensors]") {
  SECTION("null metadata, padding, several empty tensors at one offset") {
    const std::string header = R"({"__metadata__":null,"a":)" + entry("F32", "[0]", 0, 0) + R"(,"b":)" +
                               entry("I8", "[2]", 0, 2) + R"(,"c":)" + entry("BOOL", "[3,0]", 2, 2) + "}    ";
    auto c = read_safetensors(mapped_file::from_memory(st_bytes(header, 2), "ok.safetensors"));
    REQUIRE(c.tensors.size() == 3);
    CHECK(c.tensors[0].name == "a");
    CHECK(c.tensors[1].name == "b");
    CHECK(c.tensors[2].name == "c");
    CHECK(c.tensors[2].view.shape == std::vector<int64_t>{3, 0});
  }
  SECTION("unicode names and escapes") {
    const std::string header =
        R"({"caf\u00e9.w":)" + entry("U8", "[1]", 0, 1) + R"(,"中":)" + entry("U8", "[1]", 1, 2) + "}";
    auto c = read_safetensors(mapped_file::from_memory(st_bytes(header, 2), "ok.safetensors"));
    REQUIRE(c.tensors.size() == 2);
    CHECK(c.tensors[0].name == "caf\xc3\xa9.w");
    CHECK(c.tensors[1].name == "\xe4\xb8\xad");
  }
}

TEST_CASE("reads a header with many tensors in linear time", "[safetensors]") {
  constexpr int kCount = 50000;
  std::string header = R"({"__metadata__":{"k":"v"})";
  for (int i = kCount; i-- > 0;)
    header += ",\"layer." + std::to_string(i) + ".w\":" + entry("I16", "[1]", 2 * i, 2 * i + 2);
  header += "}";
  auto c = read_safetensors(mapped_file::from_memory(st_bytes(header, 2 * kCount), "many.safetensors"));
  REQUIRE(c.tensors.size() == kCount);
  CHECK(c.tensors.front().name == "layer.0.w");
  CHECK(c.tensors.back().name == "layer." + std::to_string(kCount - 1) + ".w");
}

TEST_CASE("writes a header with many tensors in linear time", "[safetensors]") {
  // 200,000 names: a writer that looks each up in the header built so far takes minutes.
  constexpr int kCount = 200000;
  temp_dir dir;
  const std::string path = dir.path + "/many.safetensors";
  std::vector<tensor_spec> specs;
  for (int i = 0; i < kCount; ++i) specs.push_back({"layer." + std::to_string(i) + ".w", dtype::int16, {1}});
  atomic_file out(path);
  safetensors_writer w(out, specs, {{"format", "pt"}});
  const std::string data(2 * kCount, '\x07');
  w.write(data.data(), data.size());
  w.finish();
  out.commit();
  auto c = read_safetensors(mapped_file::open(path));
  REQUIRE(c.tensors.size() == kCount);
  CHECK(c.tensors.back().name == "layer." + std::to_string(kCount - 1) + ".w");
  CHECK(c.metadata.at("format") == "pt");
  specs.push_back(specs[kCount / 2]);
  atomic_file again(path + ".2");
  CHECK_THROWS_WITH(safetensors_writer(again, specs, {}), Catch::Contains("duplicate tensor name"));
}

TEST_CASE("outputs inherit the inputs' __metadata__ but swavg's own", "[safetensors][save]") {
  state_dict a, b, t;
  a.format = b.format = file_format::safetensors;
  a.metadata = {{"format", "np"}, {"note", "a"}, {"swavg", "{}"}, {"swavg_update_bn", "{}"}};
  b.metadata = {{"note", "b"}, {"other", "x"}};
  t.format = file_format::torch;
  t.metadata = {{"torch_only", "1"}};
  CHECK(inherited_metadata({&a, &b, &t}) ==
        std::map<std::string, std::string>{{"format", "np"}, {"note", "b"}, {"other", "x"}});
  CHECK(inherited_metadata({nullptr, &t}) == std::map<std::string, std::string>{{"format", "pt"}});
  CHECK(inherited_metadata({}) == std::map<std::string, std::string>{{"format", "pt"}});
}

TEST_CASE("safetensors cannot hold non-tensor entries", "[safetensors][save]") {
  std::vector<object_entry> objects{{"block._extra_state", "dict", nullptr, nullptr}};
  CHECK_THROWS_WITH(check_objects_fit("o.safetensors", output_format::safetensors, objects),
                    Catch::Contains("'block._extra_state (dict)'") && Catch::Contains("--drop-objects"));
  CHECK_THROWS_AS(check_objects_fit("o.safetensors", output_format::safetensors, objects), usage_error);
  CHECK_NOTHROW(check_objects_fit("o.pt", output_format::torch, objects));
  CHECK_NOTHROW(check_objects_fit("o.safetensors", output_format::safetensors, {}));
}

TEST_CASE("rejects malformed files with a specific message", "[safetensors]") {
  struct bad_case {
    const char* label;
    std::string bytes;
    const char* substring;
  };
  const std::string f32_4 = entry("F32", "[1]", 0, 4);
  const std::vector<bad_case> cases = {
      {"header length 2^64-1", le64(UINT64_MAX) + "{}", "header length 18446744073709551615 exceeds the limit"},
      {"header length over the limit", le64(kMaxSafetensorsHeader + 1) + "{}", "exceeds the limit of 100000000"},
      {"header longer than the file", le64(100) + "{}", "header length 100 but the file has only 2 bytes"},
      {"file shorter than 8 bytes", "abc", "file is 3 bytes, too short"},
      {"empty file", "", "file is 0 bytes"},
      {"invalid UTF-8 byte", st_bytes("{\"a\xff\":{}}", 0), "header is not valid UTF-8 (byte 11"},
      {"overlong UTF-8", st_bytes("{\"\xc0\xaf\":{}}", 0), "not valid UTF-8"},
      {"UTF-8 surrogate", st_bytes("{\"\xed\xa0\x80\":{}}", 0), "not valid UTF-8"},
      {"truncated UTF-8", st_bytes("{\"a\":{}}\xe4\xb8", 0), "not valid UTF-8"},
      {"invalid JSON", st_bytes(R"({"a": )", 0), "header is not valid JSON"},
      {"text after the JSON", st_bytes("{} x", 0), "header is not valid JSON"},
      {"empty header", st_bytes("", 0), "header is not valid JSON"},
      {"NUL after the JSON", st_bytes(std::string("{}\0 x", 5), 0), "NUL byte at byte 10"},
      {"NUL inside a string", st_bytes(std::string("{\"a\0\":{}}", 9), 0), "NUL byte at byte 11"},
      {"byte order mark", st_bytes("\xef\xbb\xbf{}", 0), "byte order mark"},
      {"nesting too deep", st_bytes(R"({"__metadata__":)" + std::string(200, '[') + std::string(200, ']') + "}", 0),
       "deeper than 128 levels"},
      {"JSON not an object", st_bytes("[1, 2]", 0), "header is an array, expected a JSON object"},
      {"duplicate names", st_bytes(R"({"a":)" + f32_4 + R"(,"a":)" + entry("F32", "[1]", 4, 8) + "}", 8),
       "duplicate tensor name 'a'"},
      {"duplicate key in an entry",
       st_bytes(R"({"a":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4),
       "duplicate key 'dtype' in the entry of 'a'"},
      {"duplicate __metadata__", st_bytes(R"({"__metadata__":{},"__metadata__":{}})", 0),
       "duplicate key '__metadata__'"},
      {"NUL in a name", st_bytes(R"({"a\u0000b":)" + f32_4 + "}", 4), "tensor 'a\\x00b': name contains a NUL byte"},
      {"empty name", st_bytes(R"({"":)" + f32_4 + "}", 4), "empty name"},
      {"unknown dtype", st_bytes(R"({"w":)" + entry("F128", "[1]", 0, 4) + "}", 4), "tensor 'w': unknown dtype 'F128'"},
      {"known dtype with no PyTorch dtype", st_bytes(R"({"w":)" + entry("F6_E2M3", "[4]", 0, 3) + "}", 3),
       "tensor 'w': dtype F6_E2M3 (6-bit floats) has no PyTorch dtype, so swavg cannot read it"},
      {"F4 ending inside a byte", st_bytes(R"({"w":)" + entry("F4", "[3]", 0, 2) + "}", 2),
       "shape [3] x 4 bits = 12 bits, which does not end on a byte boundary"},
      {"F4 with an odd last dimension", st_bytes(R"({"w":)" + entry("F4", "[2,3]", 0, 3) + "}", 3),
       "tensor 'w': F4 shape [2, 3] has an odd last dimension"},
      {"F4 0-dim", st_bytes(R"({"w":)" + entry("F4", "[]", 0, 0) + "}", 0), "4 bits, which does not end"},
      {"F6 size", st_bytes(R"({"w":)" + entry("F6_E3M2", "[4]", 0, 4) + "}", 4),
       "shape [4] x 6 bits = 3 bytes but data_offsets span 4 bytes"},
      {"shape and offsets disagree", st_bytes(R"({"fc.weight":)" + entry("F32", "[10,16]", 0, 600) + "}", 600),
       "tensor 'fc.weight': shape [10, 16] x 4 bytes = 640 bytes but data_offsets span 600 bytes"},
      {"overlapping ranges",
       st_bytes(R"({"a":)" + entry("F32", "[2]", 0, 8) + R"(,"b":)" + entry("F32", "[2]", 4, 12) + "}", 12),
       "tensor 'b': data_offsets [4, 12] overlap tensor 'a' at [0, 8]"},
      {"a gap", st_bytes(R"({"a":)" + f32_4 + R"(,"b":)" + entry("F32", "[1]", 8, 12) + "}", 12),
       "tensor 'b': data_offsets [8, 12] leave a gap of 4 bytes after tensor 'a'"},
      {"a gap at the start", st_bytes(R"({"a":)" + entry("F32", "[1]", 4, 8) + "}", 8),
       "leave a gap of 4 bytes at the start"},
      {"offsets out of range", st_bytes(R"({"a":)" + entry("F32", "[4]", 0, 16) + "}", 8),
       "tensor 'a': data_offsets [0, 16] are out of range: the data section has 8 bytes"},
      {"trailing bytes", st_bytes(R"({"a":)" + f32_4 + "}", 8),
       "the data section has 8 bytes but the tensors end at 4: 4 trailing bytes"},
      {"data without tensors", st_bytes("{}", 3), "3 trailing bytes"},
      {"end before begin", st_bytes(R"({"a":)" + entry("U8", "[0]", 4, 0) + "}", 4), "data_offsets [4, 0] end before"},
      {"negative shape", st_bytes(R"({"a":)" + entry("F32", "[-1]", 0, 4) + "}", 4),
       "tensor 'a': shape element 0 is -1: negative"},
      {"negative offset", st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", 4),
       "tensor 'a': data_offsets [-4,0] holds a negative number"},
      {"fractional shape", st_bytes(R"({"a":)" + entry("F32", "[1.5]", 0, 4) + "}", 4),
       "shape element 0 is 1.5, expected a non-negative integer"},
      {"shape too large", st_bytes(R"({"a":)" + entry("U8", "[4611686018427387904,2,0]", 0, 0) + "}", 0),
       "is too large"},
      {"size overflow", st_bytes(R"({"a":)" + entry("F64", "[4611686018427387904]", 0, 0) + "}", 0),
       "x 8 bytes overflows"},
      {"one offset", st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", 4), "expected [begin, end]"},
      {"missing key", st_bytes(R"({"a":{"dtype":"F32","shape":[1]}})", 4), "tensor 'a': missing 'data_offsets'"},
      {"extra key", st_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4),
       "tensor 'a': unexpected key 'x'"},
      {"entry not an object", st_bytes(R"({"a":[1]})", 0), "tensor 'a': entry is an array"},
      {"dtype not a string", st_bytes(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", 4),
       "tensor 'a': dtype is a number 4, expected a string"},
      {"metadata with a non-string value", st_bytes(R"({"__metadata__":{"k":1}})", 0),
       "__metadata__ value for key 'k' is a number 1, expected a string"},
      {"metadata not an object", st_bytes(R"({"__metadata__":"x"})", 0), "__metadata__ is a string"},
  };
  for (const auto& c : cases) {
    SECTION(c.label) {
      auto file = mapped_file::from_memory(c.bytes, kBadPath);
      try {
        read_safetensors(file);
        FAIL("no error for " << c.label);
      } catch (const input_error& e) {
        const std::string what = e.what();
        INFO(what);
        CHECK(what.rfind(kBadPath + ": ", 0) == 0);
        CHECK(what.find(c.substring) != std::string::npos);
        CHECK(e.code() == exit_code::bad_input);
      }
    }
  }
}

TEST_CASE("looks_like_safetensors", "[safetensors]") {
  auto looks = [](const std::string& b) {
    return looks_like_safetensors(reinterpret_cast<const uint8_t*>(b.data()), b.size());
  };
  CHECK(looks(st_bytes("{}", 0)));
  CHECK(looks(st_bytes(R"({"a":)" + entry("F32", "[1]", 0, 4) + "}", 4)));
  CHECK_FALSE(looks(le64(0)));
  CHECK_FALSE(looks(le64(1)));
  CHECK_FALSE(looks(st_bytes("[]", 0)));
  CHECK_FALSE(looks(le64(UINT64_MAX) + "{}"));
  CHECK_FALSE(looks(le64(3) + "{}"));
  CHECK_FALSE(looks("PK\x03\x04\x00\x00\x00\x00\x00\x00"));
}

TEST_CASE("writer produces the reference implementation's bytes", "[safetensors]") {
  temp_dir dir;
  const std::string path = dir.path + "/out.safetensors";
  auto write_file = [&](const std::vector<tensor_spec>& specs, const std::map<std::string, std::string>& metadata,
                        const std::string& data) {
    atomic_file out(path);
    safetensors_writer w(out, specs, metadata);
    w.write(data.data(), data.size());
    w.finish();
    out.commit();
    return read_all(path);
  };
  SECTION("one tensor") {
    std::string data;
    for (float f : {0.f, 1.f, 2.f, 3.f, 4.f, 5.f}) data.append(reinterpret_cast<const char*>(&f), 4);
    const std::string header = R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})";
    CHECK(header.size() == 64);
    CHECK(write_file({{"attn.0", dtype::float32, {1, 2, 3}}}, {}, data) == le64(64) + header + data);
  }
  SECTION("padding") {
    std::string data(24, '\x01');
    const std::string header = R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})";
    CHECK(write_file({{"attn0", dtype::float32, {1, 1, 2, 3}}}, {}, data) ==
          le64(72) + header + std::string(72 - header.size(), ' ') + data);
  }
  SECTION("no tensors") { CHECK(write_file({}, {}, "") == le64(8) + "{}      "); }
  SECTION("metadata only") {
    CHECK(write_file({}, {{"framework", "pt"}}, "") == le64(40) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
  }
}

TEST_CASE("round trip through the writer, checked by both readers", "[safetensors][fixtures]") {
  temp_dir dir;
  for (const std::string stem : {"st_mixed", "st_shuffled", "st_empty"}) {
    SECTION(stem) {
      auto in = read_safetensors(mapped_file::open(kFixtures + "/" + stem + ".safetensors"));
      const std::string path = dir.path + "/" + stem + ".safetensors";
      {
        std::vector<tensor_spec> specs;
        for (const auto& t : in.tensors) specs.push_back({t.name, t.view.type, t.view.shape});
        atomic_file out(path);
        safetensors_writer w(out, specs, in.metadata);
        for (const auto& t : in.tensors) {
          const uint8_t* p = t.view.data();
          uint64_t n = t.view.nbytes();
          uint64_t half = n / 2;
          w.write(p, half);
          w.write(p + half, n - half);
        }
        w.finish();
        out.commit();
      }
      auto file = mapped_file::open(path);
      const uint64_t header_len = load_le<uint64_t>(file->data());
      CHECK(header_len % 8 == 0);
      auto back = read_safetensors(file);
      REQUIRE(back.tensors.size() == in.tensors.size());
      CHECK(back.metadata == in.metadata);
      for (size_t i = 0; i < in.tensors.size(); ++i) {
        const auto& a = in.tensors[i].view;
        const auto& b = back.tensors[i].view;
        CHECK(back.tensors[i].name == in.tensors[i].name);
        CHECK(a.type == b.type);
        CHECK(a.shape == b.shape);
        REQUIRE(a.nbytes() == b.nbytes());
        CHECK(std::memcmp(a.data(), b.data(), a.nbytes()) == 0);
      }
      CHECK(run_python_check(path, kFixtures + "/" + stem + ".json") == 0);
    }
  }
}

TEST_CASE("the Python reference checker rejects a mismatch", "[safetensors][fixtures]") {
  temp_dir dir;
  const std::string path = dir.path + "/x.safetensors";
  {
    atomic_file out(path);
    safetensors_writer w(out, {{"a", dtype::float32, {2, 2}}, {"b", dtype::int32, {6}}, {"c", dtype::float16, {3}}},
                         {});
    std::string zeros(46, '\0');
    w.write(zeros.data(), zeros.size());
    w.finish();
    out.commit();
  }
  CHECK(run_python_check(path, kFixtures + "/st_shuffled.json", true) == 1);
}

TEST_CASE("every dtype safetensors 0.8 has is read as PyTorch's", "[safetensors]") {
  struct row {
    const char* name;
    const char* shape;
    uint64_t bytes;
    dtype type;
    std::vector<int64_t> view_shape;
  };
  const std::vector<row> rows = {
      {"BOOL", "[2]", 2, dtype::bool_, {2}},
      {"U8", "[2]", 2, dtype::uint8, {2}},
      {"I8", "[2]", 2, dtype::int8, {2}},
      {"F8_E5M2", "[2]", 2, dtype::float8_e5m2, {2}},
      {"F8_E4M3", "[2]", 2, dtype::float8_e4m3fn, {2}},
      {"F8_E8M0", "[2]", 2, dtype::float8_e8m0fnu, {2}},
      {"F8_E4M3FNUZ", "[2]", 2, dtype::float8_e4m3fnuz, {2}},
      {"F8_E5M2FNUZ", "[2]", 2, dtype::float8_e5m2fnuz, {2}},
      {"I16", "[2]", 4, dtype::int16, {2}},
      {"U16", "[2]", 4, dtype::uint16, {2}},
      {"F16", "[2]", 4, dtype::float16, {2}},
      {"BF16", "[2]", 4, dtype::bfloat16, {2}},
      {"I32", "[2]", 8, dtype::int32, {2}},
      {"U32", "[2]", 8, dtype::uint32, {2}},
      {"F32", "[2]", 8, dtype::float32, {2}},
      {"C64", "[2]", 16, dtype::complex64, {2}},
      {"F64", "[2]", 16, dtype::float64, {2}},
      {"I64", "[2]", 16, dtype::int64, {2}},
      {"U64", "[2]", 16, dtype::uint64, {2}},
      {"F4", "[3,4]", 6, dtype::float4_e2m1fn_x2, {3, 2}},  // two 4-bit values per element, along the last dim
      {"F4", "[0,2]", 0, dtype::float4_e2m1fn_x2, {0, 1}},
  };
  temp_dir dir;
  for (const auto& r : rows) {
    INFO(r.name << " " << r.shape);
    const std::string header = R"({"w":)" + entry(r.name, r.shape, 0, r.bytes) + "}";
    auto c = read_safetensors(mapped_file::from_memory(st_bytes(header, r.bytes), "ok.safetensors"));
    REQUIRE(c.tensors.size() == 1);
    CHECK(c.tensors[0].view.type == r.type);
    CHECK(c.tensors[0].view.shape == r.view_shape);
    CHECK(c.tensors[0].view.nbytes() == r.bytes);
    // written back under the same name and shape
    const std::string path = dir.path + "/back.safetensors";
    atomic_file out(path);
    safetensors_writer w(out, {{"w", r.type, r.view_shape}}, {});
    w.write(c.tensors[0].view.data(), r.bytes);
    w.finish();
    out.commit();
    const std::string back = read_all(path);
    const uint64_t n = load_le<uint64_t>(reinterpret_cast<const uint8_t*>(back.data()));
    const json h = json::parse(back.substr(8, n));
    CHECK(h["w"]["dtype"] == r.name);
    CHECK(h["w"]["shape"].dump() == json::parse(r.shape).dump());
  }
}

TEST_CASE("writer refuses what safetensors cannot hold", "[safetensors]") {
  temp_dir dir;
  atomic_file out(dir.path + "/w.safetensors");
  auto refuses = [&](const std::vector<tensor_spec>& specs, const std::string& substring,
                     const std::map<std::string, std::string>& metadata = {}) {
    try {
      safetensors_writer w(out, specs, metadata);
      FAIL("no error");
    } catch (const usage_error& e) {
      INFO(e.what());
      CHECK(std::string(e.what()).find(substring) != std::string::npos);
    }
  };
  refuses({{"y", dtype::float32, {1}}, {"z", dtype::complex128, {}}}, "safetensors cannot hold complex128 tensor 'z'");
  refuses({{"h", dtype::complex32, {2}}}, "safetensors cannot hold complex32 tensor 'h'");
  refuses({{"b", dtype::bits8, {2}}}, "safetensors cannot hold bits8 tensor 'b'");
  refuses({{"f", dtype::float4_e2m1fn_x2, {}}}, "the 0-dim float4_e2m1fn_x2 tensor 'f'");
  refuses({{"a", dtype::float32, {1}}, {"a", dtype::int8, {1}}}, "duplicate tensor name 'a'");
  refuses({{"", dtype::float32, {1}}}, "empty name");
  refuses({{"__metadata__", dtype::float32, {1}}}, "'__metadata__'");
  refuses({{std::string("a\0b", 3), dtype::float32, {1}}}, "NUL byte");
  refuses({{"bad\xff", dtype::float32, {1}}}, "not valid UTF-8");
  refuses({{"neg", dtype::float32, {2, -1}}}, "negative size");
  refuses({{"huge", dtype::float64, {INT64_MAX, 4}}}, "too large");
  refuses({}, "not valid UTF-8", {{"k", "\xc0\xaf"}});
  CHECK(out.tell() == 0);
}

TEST_CASE("writer checks the byte count", "[safetensors]") {
  temp_dir dir;
  atomic_file out(dir.path + "/w.safetensors");
  safetensors_writer w(out, {{"a", dtype::int16, {3}}}, {});
  const char bytes[8] = {};
  SECTION("too few") {
    w.write(bytes, 5);
    try {
      w.finish();
      FAIL("no error");
    } catch (const error& e) {
      CHECK(e.code() == exit_code::internal);
      CHECK(std::string(e.what()).find("got 5 bytes but the header declares 6") != std::string::npos);
    }
  }
  SECTION("too many") {
    w.write(bytes, 4);
    try {
      w.write(bytes, 3);
      FAIL("no error");
    } catch (const error& e) {
      CHECK(e.code() == exit_code::internal);
    }
  }
}
