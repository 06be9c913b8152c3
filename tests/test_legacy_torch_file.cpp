// The legacy torch.save reader: files PyTorch wrote (compared with what torch.load read back), and
// hand-made streams for every bound at its edge (the last valid file, the first invalid one).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/io/load.h"
#include "formats/torch/legacy_torch_file.h"
#include "formats/torch/torch_file.h"
#include "support.h"
#include "util/crc32.h"
#include "util/error.h"
#include "util/mapped_file.h"

using namespace swavg;
using namespace std::string_literals;
using swavg::test::fixture;

namespace {

const std::string kPath = "legacy.pt";

std::string le(uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::string str(const std::string& s) { return "X" + le(s.size(), 4) + s; }

std::string integer(int64_t v) {
  if (v >= 0 && v < 256) return "K" + le(static_cast<uint64_t>(v), 1);
  if (v >= INT32_MIN && v <= INT32_MAX) return "J" + le(static_cast<uint32_t>(v), 4);
  return "\x8a\x08"s + le(static_cast<uint64_t>(v), 8);
}

std::string ints(const std::vector<int64_t>& v) {
  std::string s = "(";
  for (int64_t x : v) s += integer(x);
  return s + "t";
}

struct tensor_spec {
  std::string name, key = "0", cls = "FloatStorage";
  int64_t numel = 12, offset = 0;
  std::vector<int64_t> shape{3, 4}, strides{4, 1};
};

// The object pickle: a dict of tensors, each rebuilt as torch.save writes them.
std::string object(const std::vector<tensor_spec>& tensors) {
  std::string s = "\x80\x02}(";
  for (const auto& t : tensors) {
    s += str(t.name) + "ctorch._utils\n_rebuild_tensor_v2\n(";
    s += "(" + str("storage") + "ctorch\n" + t.cls + "\n" + str(t.key) + str("cpu") + integer(t.numel) + "NtQ";
    s += integer(t.offset) + ints(t.shape) + ints(t.strides) + "\x89" + "ccollections\nOrderedDict\n)R" + "tR";
  }
  return s + "u.";
}

std::string key_list(const std::vector<std::string>& keys) {
  std::string s = "\x80\x02](";
  for (const auto& k : keys) s += str(k);
  return s + "e.";
}

const std::string kMagicLe = "\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19"s;

std::string header(const std::string& magic = kMagicLe, int64_t version = 1001) {
  return "\x80\x02\x8a"s + static_cast<char>(magic.size()) + magic + "." + "\x80\x02" + integer(version) + "." +
         "\x80\x02}.";
}

std::string storage(int64_t count, size_t bytes, char fill = 1) {
  return le(static_cast<uint64_t>(count), 8) + std::string(bytes, fill);
}

// A file of one 3x4 float tensor 'w' on storage "0": the good file, and its parts for edits.
struct parts {
  std::string head = header();
  std::string obj = object({{"w"}});
  std::string keys = key_list({"0"});
  std::string data = storage(12, 48);
  std::string bytes() const { return head + obj + keys + data; }
};

state_dict read(const std::string& bytes, const std::string& key = "") {
  return read_legacy_torch_file(mapped_file::from_memory(bytes, kPath), key);
}

std::string error_of(const std::string& bytes) {
  try {
    read(bytes);
  } catch (const input_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a hand-made legacy file reads, its tensor a view into the mapping", "[legacy_torch_file]") {
  parts p;
  std::string bytes = p.head + p.obj + p.keys + le(12, 8);
  for (int i = 0; i < 12; ++i) bytes += le(0x3f800000u + i, 4);
  auto file = mapped_file::from_memory(bytes, kPath);
  REQUIRE(looks_like_legacy_torch_file(file->data(), file->size()));
  state_dict sd = read_legacy_torch_file(file, "");
  REQUIRE(sd.tensors.size() == 1);
  const tensor_view& v = sd.tensors[0].view;
  CHECK(sd.tensors[0].name == "w");
  CHECK(v.shape == std::vector<int64_t>{3, 4});
  CHECK(v.storage == file->data() + (bytes.size() - 48));
  CHECK(v.storage_bytes == 48);
  CHECK(v.mapping == file.get());
  CHECK(sd.format == file_format::torch);
}

TEST_CASE("legacy: magic number and protocol version are exactly torch's", "[legacy_torch_file]") {
  parts p;
  CHECK(error_of(p.bytes()) == "");
  std::string magic = kMagicLe;
  magic[0] = 0x6d;  // MAGIC_NUMBER + 1
  p.head = header(magic);
  CHECK(error_of(p.bytes()) ==
        "legacy.pt: not a torch.save file: its first pickle holds the int 0x1950a86a20f9469cfc6d, expected the "
        "legacy format's magic number 0x1950a86a20f9469cfc6c");
  magic[0] = 0x6b;  // MAGIC_NUMBER - 1
  p.head = header(magic);
  CHECK_THAT(error_of(p.bytes()), Catch::Contains("holds the int 0x1950a86a20f9469cfc6b"));
  for (int64_t version : {1000, 1002}) {
    p.head = header(kMagicLe, version);
    CHECK(error_of(p.bytes()) ==
          fmt::format("legacy.pt: legacy torch.save protocol version is the int {}, expected the int 1001", version));
  }
  // The text form protocols 0 and 1 write is recognised too.
  const std::string text = "L119547037146038801333356L\n.";
  CHECK(looks_like_legacy_torch_file(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  CHECK_FALSE(looks_like_legacy_torch_file(reinterpret_cast<const uint8_t*>(text.data()), text.size() - 2));
}

TEST_CASE("legacy: the element count's 8 bytes and the storage's bytes at their edges", "[legacy_torch_file]") {
  parts p;
  // An empty storage: 8 count bytes and nothing else is the last valid file; 7 is the first invalid.
  p.obj = object({{"w", "0", "FloatStorage", 0, 0, {0}, {1}}});
  p.data = le(0, 8);
  CHECK(error_of(p.bytes()) == "");
  const size_t count_at = (p.head + p.obj + p.keys).size();
  p.data = le(0, 7);
  CHECK(error_of(p.bytes()) ==
        fmt::format("legacy.pt: storage '0' (1 of 1): its element count at byte {} needs 8 bytes, the file has 7 left",
                    count_at));
  // 48 bytes of data: 48 read, 47 refused.
  parts q;
  const size_t data_at = (q.head + q.obj + q.keys).size() + 8;
  q.data = storage(12, 47);
  CHECK(error_of(q.bytes()) ==
        fmt::format("legacy.pt: storage '0' (1 of 1): 12 elements of FloatStorage need 48 bytes at byte {}, the file "
                    "has 47 left",
                    data_at));
  q.data = storage(12, 48);
  CHECK(error_of(q.bytes()) == "");
  // Trailing bytes: none is valid, one is refused.
  CHECK(error_of(q.bytes() + "x") ==
        fmt::format("legacy.pt: 1 bytes follow the last storage (which ends at byte {}); expected the end of the file",
                    q.bytes().size()));
}

TEST_CASE("legacy: the count must be the declared element count", "[legacy_torch_file]") {
  parts p;
  const size_t count_at = (p.head + p.obj + p.keys).size();
  for (int64_t count : {11, 13, -1}) {
    p.data = storage(count, 48);
    CHECK(error_of(p.bytes()) ==
          fmt::format("legacy.pt: storage '0' (1 of 1): the file gives {} elements at byte {}, the object declares 12 "
                      "(FloatStorage)",
                      count, count_at));
  }
}

TEST_CASE("legacy: storage sizes that overflow or reach past the file", "[legacy_torch_file]") {
  // 2^62 floats are 2^64 bytes: the first count that overflows; 2^62 - 1 floats fit in 64 bits.
  const int64_t first_overflow = int64_t{1} << 62;
  parts p;
  p.obj = object({{"w", "0", "FloatStorage", first_overflow}});
  p.data = storage(first_overflow, 48);
  CHECK_THAT(error_of(p.bytes()),
             Catch::Contains("4611686018427387904 elements of FloatStorage need more than 2^64 bytes at byte"));
  p.obj = object({{"w", "0", "FloatStorage", first_overflow - 1}});
  p.data = storage(first_overflow - 1, 48);
  CHECK_THAT(error_of(p.bytes()), Catch::Contains("4611686018427387903 elements of FloatStorage need "
                                                  "18446744073709551612 bytes at byte"));
  // INT64_MAX elements of one byte: no overflow, far past the end.
  p.obj = object({{"w", "0", "ByteStorage", INT64_MAX}});
  p.data = storage(INT64_MAX, 48);
  CHECK_THAT(error_of(p.bytes()), Catch::Contains("9223372036854775807 elements of ByteStorage need "
                                                  "9223372036854775807 bytes"));
}

TEST_CASE("legacy: the key list holds each used key once and nothing else", "[legacy_torch_file]") {
  parts p;
  p.keys = key_list({"0", "0"});
  p.data = storage(12, 48) + storage(12, 48);
  CHECK(error_of(p.bytes()) == "legacy.pt: storage key '0' is listed twice (entries 0 and 1 of the storage key list)");
  p.keys = key_list({"0", "7"});
  CHECK(error_of(p.bytes()) ==
        "legacy.pt: storage key '7' (entry 1 of the storage key list) names no storage of the object");
  p.keys = key_list({});
  p.data = "";
  CHECK(error_of(p.bytes()) ==
        "legacy.pt: storage '0' is used by the object but missing from the storage key list (its bytes are not in the "
        "file)");
  // Two storages listed in another order than used: read by key, in the listed order.
  parts two;
  two.obj = object({{"a", "5", "FloatStorage", 2, 0, {2}, {1}}, {"b", "6", "DoubleStorage", 1, 0, {}, {}}});
  two.keys = key_list({"6", "5"});
  two.data = storage(1, 8, 2) + storage(2, 8, 3);
  state_dict sd = read(two.bytes());
  REQUIRE(sd.tensors.size() == 2);
  CHECK(sd.tensors[0].view.storage[0] == 3);
  CHECK(sd.tensors[1].view.storage[0] == 2);
  CHECK(sd.tensors[1].view.type == dtype::float64);
}

TEST_CASE("legacy: views are checked against their storage", "[legacy_torch_file]") {
  parts p;
  p.obj = object({{"w", "0", "FloatStorage", 12, 0, {12}, {1}}});
  CHECK(error_of(p.bytes()) == "");
  p.obj = object({{"w", "0", "FloatStorage", 12, 1, {12}, {1}}});
  CHECK_THAT(error_of(p.bytes()), Catch::Contains("legacy.pt: tensor 'w'"));
  p.obj = object({{"w"}, {"v", "0", "FloatStorage", 13, 0, {13}, {1}}});
  CHECK_THAT(error_of(p.bytes()), Catch::Contains("storage '0' is declared with 13 elements here but 12 elsewhere"));
}

TEST_CASE("legacy: truncation names the pickle", "[legacy_torch_file]") {
  const std::string good = parts().bytes();
  const size_t magic_end = 15;
  CHECK_THAT(error_of(good.substr(0, magic_end)),
             Catch::Contains("legacy.pt: legacy torch.save file ends at byte 15 where the protocol version (pickle 2 "
                             "of 5) should start"));
  CHECK_THAT(error_of(good.substr(0, magic_end - 1)),
             Catch::Contains("the magic number (pickle 1 of 5, starting at file byte 0)"));
}

TEST_CASE("legacy files PyTorch wrote read as torch.load reads them", "[legacy_torch_file][fixtures]") {
  for (const char* name : {"plain", "shared", "nested", "parameters"}) {
    INFO(name);
    const std::string path = fixture(std::string("legacy/") + name + ".pt");
    state_dict sd = load_state_dict(path);
    auto m = test::read_json(fixture(std::string("legacy/") + name + ".json"));
    const auto& want = m["tensors"];
    REQUIRE(sd.tensors.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const auto& t = sd.tensors[i];
      INFO("tensor " << want[i]["name"]);
      CHECK(t.name == want[i]["name"].get<std::string>());
      CHECK(dtype_name(t.view.type) == want[i]["dtype"].get<std::string>());
      CHECK(t.view.shape == want[i]["shape"].get<std::vector<int64_t>>());
      CHECK(t.view.strides == want[i]["stride"].get<std::vector<int64_t>>());
      CHECK(t.view.offset == want[i]["storage_offset"].get<int64_t>());
      const std::string bytes = test::row_major_bytes(t.view);
      CHECK(crc32_update(0, bytes.data(), bytes.size()) == want[i]["crc32"].get<uint32_t>());
    }
    CHECK(sd.key == m["key"].get<std::string>());
    std::vector<std::string> others;
    for (const auto& o : sd.others) others.push_back(o.path);
    std::sort(others.begin(), others.end());
    CHECK(others == m["others"].get<std::vector<std::string>>());
  }
  // --key as for the ZIP format: the dict named, or a usage error listing what is there.
  const auto nested = mapped_file::open(fixture("legacy/nested.pt"));
  CHECK(read_torch_file(nested, "state_dict").tensors.size() ==
        load_state_dict(fixture("legacy/nested.pt")).tensors.size());
  CHECK_THROWS_AS(read_torch_file(nested, "nope"), usage_error);
  CHECK_THROWS_WITH(read_torch_file(nested, "nope"), Catch::Contains("no entry 'nope'") && Catch::Contains("'epoch'"));
  CHECK_THROWS_WITH(read_torch_file(nested, "epoch"), Catch::Contains("type int, expected a dict of tensors"));
  // Tied weights share their mapped bytes.
  state_dict shared = load_state_dict(fixture("legacy/shared.pt"));
  CHECK(shared.tensors[0].view.storage == shared.tensors[1].view.storage);
}
