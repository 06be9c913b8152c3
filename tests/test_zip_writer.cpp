// The ZIP writer (formats/zip/zip_writer.cpp): its archives read back aligned, zipfile and PyTorch read
// them, and misusing it is an internal error.
#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "formats/zip/zip_reader.h"
#include "formats/zip/zip_writer.h"
#include "util/atomic_file.h"
#include "util/crc32.h"
#include "util/error.h"
#include "zip_support.h"

using namespace swavg;
using namespace swavg::zip_test;

TEST_CASE("the writer's archives read back, aligned, and zipfile verifies them", "[zip]") {
  const bool force_zip64 = GENERATE(false, true);
  INFO("force_zip64 " << force_zip64);
  temp_dir dir;

  std::vector<record_spec> records = {
      {"archive/data.pkl", pattern_bytes(1000, 1)},
      {"archive/byteorder", "little"},
      {"archive/data/0", pattern_bytes(0, 2)},
      {"archive/data/1", pattern_bytes(1, 3), true},
      {"archive/data/2", pattern_bytes(63, 4)},
      {"archive/data/3", pattern_bytes(64, 5), true},
      {"archive/data/4", pattern_bytes(65, 6)},
      {"archive/data/5", pattern_bytes(100000, 7), true},
      {"archive/data/6", pattern_bytes(0, 8), true},
      {"archive/" + std::string(300, 'n'), pattern_bytes(4097, 9)},
      {"archive/donn\xc3\xa9"
       "es/\xc3\xa9t\xc3\xa9",
       pattern_bytes(77, 10), true},
      {"archive/version", "3\n"},
  };
  for (int i = 0; i < 70; ++i)
    records.push_back({"archive/many/" + std::string(static_cast<size_t>(i) + 1, 'x'),
                       pattern_bytes(static_cast<size_t>(i) * 3, 100 + i), i % 2 == 0});
  const std::string path = dir / "out.pt";
  const std::string bytes = write_archive(path, records, force_zip64);

  zip_reader r(u8(bytes), bytes.size(), path);
  REQUIRE(r.entries().size() == records.size());
  CHECK(r.root() == "archive");
  for (size_t i = 0; i < records.size(); ++i) {
    const zip_entry& e = r.entries()[i];
    INFO("record " << records[i].name);
    CHECK(e.name == records[i].name);
    CHECK(e.data_offset % 64 == 0);
    CHECK(e.method == 0);
    CHECK(e.size == records[i].bytes.size());
    CHECK(&r.stored(e.name) == &e);
    CHECK(std::string(reinterpret_cast<const char*>(r.bytes(e)), e.size) == records[i].bytes);
    CHECK(e.crc32 == crc32_update(0, records[i].bytes.data(), records[i].bytes.size()));
    // The "FB" padding field ends the local header's extra, right before the data.
    const uint64_t fb = e.header_offset + 30 + e.name.size() + (force_zip64 ? 20 : 0);
    CHECK(bytes.substr(fb, 2) == "FB");
    CHECK(get16(bytes, fb + 2) == e.data_offset - fb - 4);
    CHECK(bytes.substr(fb + 4, e.data_offset - fb - 4) == std::string(e.data_offset - fb - 4, 'Z'));
    CHECK(get32(bytes, e.header_offset + 14) == e.crc32);
  }

  const layout l(bytes);
  CHECK((l.end64 != 0) == force_zip64);
  if (force_zip64) {
    CHECK(get16(bytes, l.eocd + 10) == 0xFFFF);
    CHECK(get32(bytes, l.eocd + 16) == 0xFFFFFFFFu);
    for (uint64_t c : l.central) {
      CHECK(get32(bytes, c + 20) == 0xFFFFFFFFu);
      CHECK(get32(bytes, c + 42) == 0xFFFFFFFFu);
      CHECK(get16(bytes, c + 6) == 45);
    }
  }

  std::string output;
  const char* verify = R"(
import json, sys, zipfile, zlib
with zipfile.ZipFile(sys.argv[1]) as z:
    bad = z.testzip()
    print(json.dumps({"bad": bad, "entries": [
        {"name": i.filename, "size": i.file_size, "crc": i.CRC, "flags": i.flag_bits,
         "data_crc": zlib.crc32(z.read(i))} for i in z.infolist()]}))
)";
  const int status = run_python(dir, verify, "'" + path + "'", output);
  INFO("python: " << output);
  REQUIRE(status == 0);
  const auto doc = nlohmann::json::parse(output);
  CHECK(doc["bad"].is_null());
  REQUIRE(doc["entries"].size() == records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& x = doc["entries"][i];
    const bool ascii = std::all_of(records[i].name.begin(), records[i].name.end(),
                                   [](char c) { return static_cast<unsigned char>(c) < 0x80; });
    CHECK(x["name"].get<std::string>() == records[i].name);
    CHECK(x["size"].get<uint64_t>() == records[i].bytes.size());
    CHECK(x["crc"].get<uint32_t>() == r.entries()[i].crc32);
    CHECK(x["data_crc"].get<uint32_t>() == r.entries()[i].crc32);
    CHECK(x["flags"].get<int>() == (ascii ? 0 : 0x800));
  }
}

namespace {

std::vector<zip_planned_record> planned(const std::vector<record_spec>& records) {
  std::vector<zip_planned_record> out;
  for (const auto& r : records) out.push_back({r.name, r.bytes.size()});
  return out;
}

}  // namespace

TEST_CASE("zip_archive_size is the size of what the writer writes", "[zip]") {
  const bool force_zip64 = GENERATE(false, true);
  INFO("force_zip64 " << force_zip64);
  temp_dir dir;
  std::vector<std::vector<record_spec>> archives = {{}};
  // Every alignment remainder of the next header, and names of 1 to 300 bytes.
  for (size_t n = 0; n <= 64; ++n) archives.push_back({{"d", pattern_bytes(n, 1)}, {"after", "x"}});
  archives.push_back({{std::string(300, 'n'), "abc"}, {"archive/donn\xc3\xa9", pattern_bytes(4097, 2)}});
  for (size_t i = 0; i < archives.size(); ++i) {
    INFO("archive " << i);
    const std::string bytes = write_archive(dir / "a.zip", archives[i], force_zip64);
    CHECK(zip_archive_size(planned(archives[i]), force_zip64) == bytes.size());
  }
}

TEST_CASE("zip_archive_size at the record count where the end record needs ZIP64", "[zip]") {
  // 65534 records fit the 16-bit count; 65535 (0xFFFF, the sentinel) takes the ZIP64 end records.
  temp_dir dir;
  std::vector<record_spec> records;
  for (int i = 0; i < 65534; ++i) records.push_back({fmt::format("r{:05}", i), ""});
  const std::string last_plain = write_archive(dir / "65534.zip", records, false);
  CHECK(zip_archive_size(planned(records)) == last_plain.size());
  CHECK(layout(last_plain).end64 == 0);
  records.push_back({"r65534", ""});
  const std::string first_zip64 = write_archive(dir / "65535.zip", records, false);
  CHECK(zip_archive_size(planned(records)) == first_zip64.size());
  CHECK(layout(first_zip64).end64 != 0);
  // one more record (a 64-byte local header, a 52-byte central entry) and the 76 bytes of ZIP64 end
  CHECK(first_zip64.size() == last_plain.size() + 64 + 52 + 76);
}

TEST_CASE("zip_archive_size at the 4 GiB edges of sizes and offsets", "[zip]") {
  constexpr uint64_t k4g = 0xFFFFFFFF;  // the 32-bit sentinel: values from here on are ZIP64
  constexpr uint64_t kEnd = 22, kEnd64 = 56 + 20;
  // One record "data": a 64-byte local header (30 + 4 + the "FB" field, padded; + 20 of ZIP64 extra
  // from 4 GiB on, still within 64), its data, a central entry of 50 bytes (+ 20 for ZIP64 sizes).
  // The directory starts past 4 GiB in both, so both end in ZIP64 end records.
  CHECK(zip_archive_size({{"data", k4g - 1}}) == 64 + (k4g - 1) + 50 + kEnd64 + kEnd);
  CHECK(zip_archive_size({{"data", k4g}}) == 64 + k4g + 70 + kEnd64 + kEnd);
  // One record "a": the directory starts at 64 + size, just below 4 GiB and at it.
  CHECK(zip_archive_size({{"a", k4g - 65}}) == 64 + (k4g - 65) + 47 + kEnd);
  CHECK(zip_archive_size({{"a", k4g - 64}}) == 64 + (k4g - 64) + 47 + kEnd64 + kEnd);
  // A second record "b" whose header starts just below 4 GiB and at it: its central entry takes the
  // 12-byte ZIP64 offset extra at 4 GiB. Its local header (35 bytes) is padded so that its data
  // starts at kMax32 + 65 in both (64-byte aligned).
  CHECK(zip_archive_size({{"a", k4g - 65}, {"b", 0}}) == k4g + 65 + 47 + 47 + kEnd64 + kEnd);
  CHECK(zip_archive_size({{"a", k4g - 64}, {"b", 0}}) == k4g + 65 + 47 + 59 + kEnd64 + kEnd);
  // The last size that fits in 2^64 bytes and the first that does not (a 67-byte central entry).
  CHECK(zip_archive_size({{"a", UINT64_MAX - 64 - 67 - kEnd64 - kEnd}}) == UINT64_MAX);
  CHECK(zip_archive_size({{"a", UINT64_MAX - 64 - 67 - kEnd64 - kEnd + 1}}) == std::nullopt);
}

TEST_CASE("an archive without records", "[zip]") {
  temp_dir dir;
  for (bool force_zip64 : {false, true}) {
    const std::string path = dir / (force_zip64 ? "empty64.pt" : "empty.pt");
    const std::string bytes = write_archive(path, {}, force_zip64);
    CHECK(bytes.size() == (force_zip64 ? 98u : 22u));
    CHECK(looks_like_zip(u8(bytes), bytes.size()));
    zip_reader r(u8(bytes), bytes.size(), path);
    CHECK(r.entries().empty());
    std::string output;
    CHECK(run_python(dir, "import sys, zipfile\nassert zipfile.ZipFile(sys.argv[1]).namelist() == []\n",
                     "'" + path + "'", output) == 0);
  }
}

TEST_CASE("PyTorch loads archives the writer rewrote", "[zip][torch][fixtures]") {
  temp_dir dir;
  std::string args;
  // Not scripted.ts: torch.jit.save deflates its code records, which the writer cannot store.
  for (const char* name : {"dtypes.pt", "training.pt"}) {
    const std::string original = fixture(name);
    const std::string bytes = read_file(original);
    zip_reader r(u8(bytes), bytes.size(), original);
    std::vector<record_spec> records;
    for (const zip_entry& e : r.entries())
      records.push_back({e.name, std::string(reinterpret_cast<const char*>(r.bytes(r.stored(e.name))), e.size),
                         records.size() % 2 == 1});
    for (bool force_zip64 : {false, true}) {
      const std::string copy = dir / ((force_zip64 ? "zip64-" : "plain-") + std::string(name));
      write_archive(copy, records, force_zip64);
      args += " '" + original + "' '" + copy + "'";
    }
  }
  const char* compare = R"(
import sys, torch
def same(a, b):
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and
                a.stride() == b.stride() and torch.equal(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) == type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b
failures = []
for original, copy in zip(sys.argv[1::2], sys.argv[2::2]):
    a, b = torch.load(original, weights_only=False), torch.load(copy, weights_only=False)
    if not same(a, b):
        failures.append(copy)
print("failures:", failures)
sys.exit(1 if failures else 0)
)";
  std::string output;
  const int status = run_python(dir, compare, args, output);
  INFO("python: " << output);
  CHECK(status == 0);
}

TEST_CASE("misusing the writer is an internal error", "[zip]") {
  temp_dir dir;
  auto expect_internal = [](const std::function<void()>& f, const std::string& what) {
    try {
      f();
      FAIL("no error; expected one containing \"" << what << "\"");
    } catch (const input_error&) {
      FAIL("input_error; expected an internal error containing \"" << what << "\"");
    } catch (const error& e) {
      INFO("message: " << e.what());
      CHECK(e.code() == exit_code::internal);
      CHECK(std::string(e.what()).find(what) != std::string::npos);
    }
  };
  atomic_file f(dir / "misuse.pt");
  zip_writer w(f);
  expect_internal([&] { w.write("x", 1); }, "without an open record");
  expect_internal([&] { w.end_record(); }, "without an open record");
  expect_internal([&] { w.add("", "x", 1); }, "record name of 0 bytes");
  w.begin_record("archive/data/0", 4);
  expect_internal([&] { w.begin_record("archive/data/1", 1); },
                  "record 'archive/data/1' started while 'archive/data/0' is open");
  expect_internal([&] { w.finish(); }, "while record 'archive/data/0' is open");
  w.write("abc", 3);
  expect_internal([&] { w.write("de", 2); }, "declared 4 bytes but 5 were written");
  expect_internal([&] { w.end_record(); }, "declared 4 bytes but only 3 were written");
  w.write("d", 1);
  w.end_record();
  w.finish();
  expect_internal([&] { w.add("archive/late", "x", 1); }, "added after finish()");
  expect_internal([&] { w.finish(); }, "finish() called twice");
}
