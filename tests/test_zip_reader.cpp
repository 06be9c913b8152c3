// The ZIP reader (formats/zip/zip_reader.cpp): PyTorch's and zipfile's archives read as zipfile reads
// them, malformed and ambiguous archives refused with a message naming the problem.
#include <catch2/catch.hpp>
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
#include "util/checked.h"
#include "util/crc32.h"
#include "util/error.h"
#include "zip_support.h"

using namespace swavg;
using namespace swavg::zip_test;

TEST_CASE("looks_like_zip", "[zip]") {
  CHECK(looks_like_zip(u8(std::string("PK\x03\x04rest")), 8));
  CHECK(looks_like_zip(u8(std::string("PK\x05\x06", 4)), 4));
  CHECK_FALSE(looks_like_zip(u8(std::string("PK\x03")), 3));
  CHECK_FALSE(looks_like_zip(nullptr, 0));
  CHECK_FALSE(looks_like_zip(u8(std::string("\x80\x02}q\x00")), 5));
  CHECK_FALSE(looks_like_zip(u8(std::string("PK\x01\x02")), 4));
}

TEST_CASE("reads PyTorch's and zipfile's archives as zipfile does", "[zip][fixtures]") {
  std::vector<fs::path> manifests;
  for (const auto& item : fs::directory_iterator(fixture("zips")))
    if (item.path().extension() == ".json") manifests.push_back(item.path());
  std::sort(manifests.begin(), manifests.end());
  REQUIRE(manifests.size() >= 12);

  size_t pytorch_archives = 0;
  for (const fs::path& manifest : manifests) {
    const auto doc = nlohmann::json::parse(read_file(manifest.string()));
    const std::string archive = doc["archive"].get<std::string>();
    INFO("archive " << archive);
    const std::string bytes = read_file(fixture(archive));
    CHECK(looks_like_zip(u8(bytes), bytes.size()));
    zip_reader r(u8(bytes), bytes.size(), archive);

    const auto& expected = doc["entries"];
    REQUIRE(r.entries().size() == expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const zip_entry& e = r.entries()[i];
      const auto& x = expected[i];
      INFO("entry " << x["name"].get<std::string>());
      CHECK(e.name == x["name"].get<std::string>());
      CHECK(e.header_offset == x["header_offset"].get<uint64_t>());
      CHECK(e.data_offset == x["data_offset"].get<uint64_t>());
      CHECK(e.size == x["file_size"].get<uint64_t>());
      CHECK(e.compressed_size == x["compress_size"].get<uint64_t>());
      CHECK(e.method == x["compress_type"].get<uint16_t>());
      CHECK(e.crc32 == x["crc"].get<uint32_t>());
      CHECK(r.find(e.name) == &e);
      if (e.method == 0) {
        CHECK(&r.stored(e.name) == &e);
        CHECK(r.bytes(e) == u8(bytes) + e.data_offset);
        CHECK(crc32_update(0, r.bytes(e), e.size) == e.crc32);
      } else {
        CHECK_THROWS_WITH(r.stored(e.name), Catch::Contains("is compressed (method 8); PyTorch archives store records "
                                                            "uncompressed"));
      }
      if (doc["pytorch"].get<bool>()) CHECK(e.data_offset % 64 == 0);
    }

    if (doc["root"].is_null()) {
      CHECK_THROWS_AS(r.root(), input_error);
    } else {
      CHECK(r.root() == doc["root"].get<std::string>());
    }
    CHECK(r.find("no/such/record") == nullptr);
    CHECK_THROWS_WITH(r.stored("no/such/record"), archive + ": record 'no/such/record' is missing");
    if (doc["pytorch"].get<bool>()) ++pytorch_archives;
  }
  CHECK(pytorch_archives == 4);
}

TEST_CASE("root() names what is wrong", "[zip][fixtures]") {
  const std::string mixed = read_file(fixture("zips/mixed_roots.zip"));
  zip_reader m(u8(mixed), mixed.size(), "mixed.pt");
  CHECK_THROWS_WITH(m.root(), Catch::StartsWith("mixed.pt: records 'archive/data.pkl' and "
                                                "'other/data/0' are in different top folders"));
  const std::string flat = read_file(fixture("zips/no_folder.zip"));
  zip_reader f(u8(flat), flat.size(), "flat.pt");
  CHECK_THROWS_WITH(f.root(), "flat.pt: record 'version' is not inside a top folder");
  const std::string empty = read_file(fixture("zips/empty.zip"));
  zip_reader e(u8(empty), empty.size(), "empty.pt");
  CHECK(e.entries().empty());
  CHECK_THROWS_WITH(e.root(), "empty.pt: the archive has no records");
}

TEST_CASE("malformed archives are rejected with a message naming the problem", "[zip][fixtures]") {
  temp_dir dir;
  const std::string base = small_archive(dir, false);
  const std::string base64 = small_archive(dir, true);
  const layout l(base);
  const layout l64(base64);
  const std::string real = read_file(fixture("dtypes.pt"));

  struct malformed {
    std::string name;
    std::function<std::string()> bytes;
    std::string message;
  };
  auto edit = [](const std::string& from, const std::function<void(std::string&)>& change) {
    return [from, change] {
      std::string s = from;
      change(s);
      return s;
    };
  };
  auto set = [](const std::string& from, uint64_t at, auto value) {
    return [from, at, value] {
      std::string s = from;
      put(s, at, value);
      return s;
    };
  };
  std::vector<malformed> cases = {
      {"empty file", [] { return std::string(); }, "not a zip archive: the file is empty"},
      {"shorter than an end record", [] { return std::string("PK\x05\x06", 4); },
       "not a zip archive: no end-of-central-directory record (the file has only 4 bytes)"},
      {"random bytes", [] { return pattern_bytes(5000, 99); },
       "not a zip archive: no end-of-central-directory record"},
      {"a pickle", [] { return std::string("\x80\x02}q\x00.", 6); }, "not a zip archive"},
      {"comment length past the end",
       edit(base, [&](std::string& s) { put<uint16_t>(s, l.eocd + 20, 1); }),
       "the end-of-central-directory record at offset " + std::to_string(l.eocd) +
           " declares a comment of 1 bytes, but 0 bytes follow it"},
      {"central directory signature",
       edit(base, [&](std::string& s) { s[l.central[0]] ^= 0x55; }),
       "corrupt central directory: entry 1 of 4 at offset " + std::to_string(l.cd_offset) +
           " has signature 0x02014b05 (expected 0x02014b50)"},
      {"third central entry's signature",
       edit(base, [&](std::string& s) { put<uint32_t>(s, l.central[2], 0x04034b50); }),
       "corrupt central directory: entry 3 of 4"},
      {"directory smaller than its entries",
       set(base, l.eocd + 12, get32(base, l.eocd + 12) - 10),
       "truncated central directory: entry 4 of 4"},
      {"end record claims more entries than fit",
       edit(base,
            [&](std::string& s) {
              put<uint16_t>(s, l.eocd + 8, 60000);
              put<uint16_t>(s, l.eocd + 10, 60000);
            }),
       "the end-of-central-directory record claims 60000 entries, but the central directory"},
      {"end record claims an extra entry",
       edit(base,
            [&](std::string& s) {
              put<uint16_t>(s, l.eocd + 8, 5);
              put<uint16_t>(s, l.eocd + 10, 5);
            }),
       "truncated central directory: entry 5 of 5"},
      {"entries on another disk", set(base, l.eocd + 8, uint16_t{3}),
       "multi-disk archives are not supported"},
      {"central directory past the end of the file",
       edit(base, [&](std::string& s) { put<uint32_t>(s, l.eocd + 16, 0xFFFFFFF0u); }),
       "the central directory (" + std::to_string(l.eocd - l.cd_offset) +
           " bytes at offset 4294967280) lies outside the file (file has " +
           std::to_string(base.size()) + " bytes)"},
      {"central directory into the end record",
       set(base, l.eocd + 12, get32(base, l.eocd + 12) + 8),
       "runs into the end-of-central-directory record at offset " + std::to_string(l.eocd)},
      {"record larger than the file",
       edit(base,
            [&](std::string& s) {
              put<uint32_t>(s, l.central[1] + 20, 5000);
              put<uint32_t>(s, l.central[1] + 24, 5000);
            }),
       "record 'archive/data/0' extends past the end of the file (needs 5000 bytes from offset " +
           std::to_string(l.entries[1].data_offset) + ", up to " +
           std::to_string(l.entries[1].data_offset + 5000) + ", file has " +
           std::to_string(base.size()) + ")"},
      {"record into the central directory",
       edit(base,
            [&](std::string& s) {
              put<uint32_t>(s, l.central[3] + 20, 100);
              put<uint32_t>(s, l.central[3] + 24, 100);
            }),
       "record 'archive/version' runs into the central directory"},
      {"local header offset past the end",
       edit(base, [&](std::string& s) { put<uint32_t>(s, l.central[2] + 42, 0x7FFFFFF0u); }),
       "record 'archive/data/1': local header at offset 2147483632 lies past the end of the file"},
      {"local header offset inside the central directory",
       edit(base, [&](std::string& s) { put<uint32_t>(s, l.central[2] + 42, l.cd_offset + 5); }),
       "record 'archive/data/1' starts inside the central directory"},
      {"local header offset after the central directory",
       edit(base,
            [&](std::string& s) {
              put<uint32_t>(s, l.central[2] + 42, static_cast<uint32_t>(l.eocd));
              put<uint16_t>(s, l.eocd + 20, 100);
              s.append(100, 'c');
            }),
       "record 'archive/data/1' starts after the central directory"},
      {"local header offset into record data",
       set(base, l.central[1] + 42, static_cast<uint32_t>(l.entries[1].data_offset)),
       "record 'archive/data/0': no local header at offset " +
           std::to_string(l.entries[1].data_offset)},
      {"local header names another record",
       edit(base, [&](std::string& s) { s[l.entries[2].header_offset + 30 + 13] = '7'; }),
       "record 'archive/data/1': the local header at offset " +
           std::to_string(l.entries[2].header_offset) + " names it 'archive/data/7'"},
      {"duplicate names",
       edit(base,
            [&](std::string& s) {
              s[l.central[2] + 46 + 13] = '0';
              s[l.entries[2].header_offset + 30 + 13] = '0';
            }),
       "record 'archive/data/0' appears twice in the central directory"},
      {"overlapping records",
       edit(base,
            [&](std::string& s) {
              const auto n = static_cast<uint32_t>(l.entries[2].header_offset -
                                                   l.entries[1].data_offset + 10);
              put<uint32_t>(s, l.central[1] + 20, n);
              put<uint32_t>(s, l.central[1] + 24, n);
              put<uint32_t>(s, l.entries[1].header_offset + 18, n);
              put<uint32_t>(s, l.entries[1].header_offset + 22, n);
            }),
       "records 'archive/data/0' and 'archive/data/1' overlap"},
      {"two entries share a local header",
       edit(base,
            [&](std::string& s) {
              put(s, l.central[2] + 42, static_cast<uint32_t>(l.entries[1].header_offset));
              s[l.central[2] + 46 + 13] = '0';
              s.replace(l.central[2] + 16, 12, s.substr(l.central[1] + 16, 12));  // CRC and sizes
            }),
       "records 'archive/data/0' and 'archive/data/0' overlap"},
      {"encrypted record", set(base, l.central[0] + 8, uint16_t{1}),
       "record 'archive/data.pkl' is encrypted"},
      {"malformed extra field",
       edit(base64, [&](std::string& s) { put<uint16_t>(s, l64.extra(s, 1) + 2, 100); }),
       "record 'archive/data/0' has a malformed extra field"},
      {"ZIP64 extra field too short",
       edit(base64, [&](std::string& s) { put<uint16_t>(s, l64.extra(s, 1) + 2, 8); }),
       "record 'archive/data/0' has a ZIP64 extra field too short for its compressed size"},
      {"ZIP64 size 2^63",
       edit(base64,
            [&](std::string& s) {
              put<uint64_t>(s, l64.extra(s, 1) + 4, uint64_t{1} << 63);
              put<uint64_t>(s, l64.extra(s, 1) + 12, uint64_t{1} << 63);
            }),
       "record 'archive/data/0' extends past the end of the file (needs 9223372036854775808 bytes"},
      {"ZIP64 size 2^64-1",
       edit(base64,
            [&](std::string& s) {
              put<uint64_t>(s, l64.extra(s, 1) + 4, ~uint64_t{0});
              put<uint64_t>(s, l64.extra(s, 1) + 12, ~uint64_t{0});
            }),
       "record 'archive/data/0' extends past the end of the file (needs 18446744073709551615 bytes "
       "from offset " + std::to_string(l64.entries[1].data_offset) + ", file has"},
      {"ZIP64 header offset 2^63",
       set(base64, l64.extra(base64, 1) + 20, uint64_t{1} << 63),
       "record 'archive/data/0': local header at offset 9223372036854775808 lies past the end"},
      {"ZIP64 locator pointing outside the file",
       set(base64, l64.eocd - 20 + 8, uint64_t{1} << 62),
       "the ZIP64 end-of-central-directory locator points to offset 4611686018427387904"},
      {"ZIP64 locator naming several disks",
       edit(base64, [&](std::string& s) { put<uint32_t>(s, l64.eocd - 20 + 16, 3); }),
       "multi-disk archives are not supported (the ZIP64 locator names 3 disks"},
      {"ZIP64 end record signature",
       edit(base64, [&](std::string& s) { s[l64.end64 + 1] = 'X'; }),
       "no ZIP64 end-of-central-directory record at offset " + std::to_string(l64.end64)},
      {"ZIP64 end record size",
       edit(base64, [&](std::string& s) { put<uint64_t>(s, l64.end64 + 4, 12); }),
       "declares a size of 12 bytes"},
      {"ZIP64 end record claims 2^60 entries",
       edit(base64,
            [&](std::string& s) {
              put<uint64_t>(s, l64.end64 + 24, uint64_t{1} << 60);
              put<uint64_t>(s, l64.end64 + 32, uint64_t{1} << 60);
            }),
       "claims 1152921504606846976 entries"},
      {"ZIP64 central directory size 2^64-1",
       edit(base64, [&](std::string& s) { put<uint64_t>(s, l64.end64 + 40, ~uint64_t{0}); }),
       "lies outside the file"},
      {"PyTorch archive missing its last byte", [&] { return real.substr(0, real.size() - 1); },
       "not a zip archive: no end-of-central-directory record"},
      {"PyTorch archive with its central directory cut out",
       [&] {
         const layout r(real);
         return real.substr(0, r.cd_offset + 100) + real.substr(r.eocd);
       },
       "the central directory"},
  };
  for (size_t cut :
       {size_t{1}, size_t{29}, size_t{30}, base.size() / 3, base.size() / 2, static_cast<size_t>(l.cd_offset),
        static_cast<size_t>(l.cd_offset) + 50, base.size() - 22, base.size() - 2}) {
    cases.push_back({"truncated to " + std::to_string(cut) + " bytes", [&base, cut] { return base.substr(0, cut); },
                     "not a zip archive"});
  }

  for (const malformed& c : cases) {
    INFO("case: " << c.name);
    expect_rejected(c.bytes(), c.message);
  }
}

TEST_CASE("mutated archives are rejected or read, never misread", "[zip][fixtures]") {
  temp_dir dir;
  const std::string scripted = read_file(fixture("scripted.ts"));
  for (const std::string& base : {small_archive(dir, false), small_archive(dir, true), scripted}) {
    const layout l(base);
    // Every byte of the directory and end records, and the first local header.
    std::vector<uint64_t> positions;
    for (uint64_t i = 0; i < 100 && i < base.size(); ++i) positions.push_back(i);
    for (uint64_t i = l.cd_offset; i < base.size(); ++i) positions.push_back(i);
    for (uint64_t at : positions) {
      for (uint8_t flip : {0x01, 0x80, 0xFF}) {
        std::string s = base;
        s[at] = static_cast<char>(s[at] ^ flip);
        parse_survives(s);
      }
    }
    for (size_t n = 0; n < base.size(); n += (base.size() > 2000 ? 7 : 1)) parse_survives(base.substr(0, n));
    std::mt19937 rng(5);
    for (int round = 0; round < 2000; ++round) {
      std::string s = base;
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int k = 0; k < edits; ++k) {
        const uint64_t at = positions[rng() % positions.size()];
        const uint32_t v = rng() % 3 == 0 ? 0xFFFFFFFFu : rng();
        for (uint64_t b = 0; b < 4 && at + b < s.size(); ++b) s[at + b] = static_cast<char>(v >> (8 * b));
      }
      parse_survives(s);
    }
  }
}

namespace {

// Inserts `bytes` at `at` into an archive without ZIP64 and moves every offset at or after it.
std::string insert_at(const std::string& from, uint64_t at, const std::string& bytes) {
  const layout l(from);
  std::string s = from;
  const auto shift = static_cast<uint32_t>(bytes.size());
  for (uint64_t c : l.central)
    if (get32(s, c + 42) >= at) put<uint32_t>(s, c + 42, get32(s, c + 42) + shift);
  if (l.cd_offset >= at) put<uint32_t>(s, l.eocd + 16, static_cast<uint32_t>(l.cd_offset) + shift);
  s.insert(at, bytes);
  return s;
}

// Gives entry i a new name of the same length, in the central directory and the local header.
std::string renamed(const std::string& from, size_t i, const std::string& name, uint16_t flags = 0) {
  const layout l(from);
  std::string s = from;
  REQUIRE(name.size() == l.entries[i].name.size());
  s.replace(l.central[i] + 46, name.size(), name);
  s.replace(l.entries[i].header_offset + 30, name.size(), name);
  put<uint16_t>(s, l.central[i] + 8, flags);
  put<uint16_t>(s, l.entries[i].header_offset + 6, flags);
  return s;
}

std::string with_comment(const std::string& from, const std::string& comment) {
  const layout l(from);
  std::string s = from;
  put<uint16_t>(s, l.eocd + 20, static_cast<uint16_t>(comment.size()));
  return s + comment;
}

}  // namespace

TEST_CASE("archives PyTorch's readers could resolve differently are refused", "[zip][fixtures]") {
  temp_dir dir;
  const std::string base = small_archive(dir, false);
  const std::string base64 = small_archive(dir, true);
  const std::string real = read_file(fixture("dtypes.pt"));  // torch.save: data descriptors, ZIP64 end
  const layout l(base);
  const layout l64(base64);
  const layout lr(real);
  const std::string eocd = base.substr(l.eocd);
  auto edited = [](std::string s, const std::function<void(std::string&)>& change) {
    change(s);
    return s;
  };
  const uint64_t locator = l64.eocd - 20;
  const uint64_t real_locator = lr.eocd - 20;

  struct bad_case {
    std::string name;
    std::string bytes;
    std::string message;
  };
  const std::vector<bad_case> cases = {
      {"one byte appended", base + "x",
       "the end-of-central-directory record at offset " + std::to_string(l.eocd) +
           " declares a comment of 0 bytes, but 1 bytes follow it"},
      {"a second end record appended", base + eocd,
       "the central directory ends at offset " + std::to_string(l.eocd) + ", but the end records start at offset " +
           std::to_string(l.eocd + 22)},
      {"an end record hidden in the comment", with_comment(base, eocd),
       "the central directory ends at offset " + std::to_string(l.eocd) + ", but the end records start at offset " +
           std::to_string(l.eocd + 22)},
      {"a signature in the comment's last 21 bytes", with_comment(base, std::string("xxPK\x05\x06yy", 8)),
       "a second end-of-central-directory signature at offset " + std::to_string(l.eocd + 24)},
      {"comment one byte longer than what follows",
       edited(with_comment(base, "abcdef"), [&](std::string& s) { put<uint16_t>(s, l.eocd + 20, 7); }),
       "declares a comment of 7 bytes, but 6 bytes follow it"},
      {"comment one byte shorter than what follows",
       edited(with_comment(base, "abcdef"), [&](std::string& s) { put<uint16_t>(s, l.eocd + 20, 5); }),
       "declares a comment of 5 bytes, but 6 bytes follow it"},
      {"ZIP64 record 8 bytes before the locator", edited(base64, [&](std::string& s) { s.insert(locator, 8, '\0'); }),
       "the ZIP64 end-of-central-directory locator points to offset " + std::to_string(l64.end64) +
           ", but the record must end right before the locator, at offset " + std::to_string(l64.end64 + 8)},
      {"ZIP64 record size 52", edited(base64, [&](std::string& s) { put<uint64_t>(s, l64.end64 + 4, 52); }),
       "declares a size of 52 bytes (expected 44)"},
      {"ZIP64 locator naming no disk", edited(base64, [&](std::string& s) { put<uint32_t>(s, locator + 16, 0); }),
       "multi-disk archives are not supported (the ZIP64 locator names 0 disks"},
      {"end record and ZIP64 record disagree on the count",
       edited(real, [&](std::string& s) { put<uint16_t>(s, lr.eocd + 10, get16(s, lr.eocd + 10) + 1); }),
       "the end-of-central-directory record gives the number of entries as " + std::to_string(lr.entries.size() + 1) +
           ", but the ZIP64 record at offset " + std::to_string(lr.end64) + " gives " +
           std::to_string(lr.entries.size())},
      {"end record and ZIP64 record disagree on the directory's offset",
       edited(real, [&](std::string& s) { put<uint32_t>(s, lr.eocd + 16, get32(s, lr.eocd + 16) - 1); }),
       "gives the central directory's offset as " + std::to_string(lr.cd_offset - 1)},
      {"4 bytes before the first record", insert_at(base, 0, "JUNK"),
       "4 bytes at offsets 0 to 4 belong to no record (before the first); expected record 'archive/data.pkl' to "
       "start at offset 0"},
      {"a whole archive before the first record", insert_at(base, 0, base), "belong to no record (before the first)"},
      {"the archive shifted without its offsets (zipfile's concat)", "JUNK" + base, "corrupt central directory"},
      {"1 byte between two records", insert_at(base, l.entries[2].header_offset, "x"),
       "1 bytes at offsets " + std::to_string(l.entries[2].header_offset) + " to " +
           std::to_string(l.entries[2].header_offset + 1) + " belong to no record (after 'archive/data/0')"},
      {"1 byte before the central directory", insert_at(base, l.cd_offset, "x"),
       "1 bytes at offsets " + std::to_string(l.cd_offset) + " to " + std::to_string(l.cd_offset + 1) +
           " belong to no record (after 'archive/version'); expected the central directory"},
      {"1 byte between the directory and the end record", insert_at(base, l.eocd, "x"),
       "the central directory ends at offset " + std::to_string(l.eocd) + ", but the end records start at offset " +
           std::to_string(l.eocd + 1)},
      {"1 byte in the directory after its entries",
       edited(insert_at(base, l.eocd, "x"),
              [&](std::string& s) { put<uint32_t>(s, l.eocd + 1 + 12, get32(s, l.eocd + 1 + 12) + 1); }),
       "the central directory has 1 bytes after its 4 entries"},
      {"names equal ignoring case", renamed(base, 2, "archive/DATA/0"),
       "records 'archive/DATA/0' and 'archive/data/0' differ only in case"},
      {"a NUL in a name",
       renamed(base, 2,
               std::string("archive/data\0"
                           "1",
                           14)),
       "has a NUL byte in its name"},
      {"a backslash in a name", renamed(base, 2, "archive\\data/1"), "has a backslash in its name"},
      {"an absolute name", renamed(base, 2, "/rchive/data/1"), "record '/rchive/data/1' has an absolute path"},
      {"a drive letter", renamed(base, 2, "C:chive/data/1"), "record 'C:chive/data/1' has an absolute path"},
      {"a '..' component", renamed(base, 2, "archive/../a/1"), "record 'archive/../a/1' has a '..' component"},
      {"a '.' component", renamed(base, 2, "archive/./ta/1"), "has an empty or '.' path component"},
      {"an empty component", renamed(base, 2, "archive//ata/1"), "has an empty or '.' path component"},
      {"a folder entry", renamed(base, 2, "archive/data1/"), "has an empty or '.' path component"},
      {"non-ASCII without the UTF-8 flag", renamed(base, 2, "archive/d\xc3\xa9ta1"),
       "record 'archive/d\xc3\xa9ta1' has non-ASCII bytes in its name but not the UTF-8 flag"},
      {"invalid UTF-8 with the flag", renamed(base, 2, "archive/d\xff\xfeta1", 0x800),
       "record 'archive/d\\xff\\xfeta1' has a name that is not valid UTF-8"},
      {"overlong UTF-8 with the flag", renamed(base, 2, "archive/d\xc0\xafta1", 0x800), "is not valid UTF-8"},
      {"local header flags differ",
       edited(base, [&](std::string& s) { put<uint16_t>(s, l.entries[1].header_offset + 6, 0x800); }),
       "record 'archive/data/0': the local header at offset " + std::to_string(l.entries[1].header_offset) +
           " gives flags 0x0800 and method 0, the central directory flags 0x0000 and method 0"},
      {"local header method differs",
       edited(base, [&](std::string& s) { put<uint16_t>(s, l.entries[1].header_offset + 8, 8); }),
       "gives flags 0x0000 and method 8"},
      {"local header size differs",
       edited(base, [&](std::string& s) { put<uint32_t>(s, l.entries[1].header_offset + 22, 301); }),
       "record 'archive/data/0': the local header at offset " + std::to_string(l.entries[1].header_offset) +
           " gives size 301, compressed size 300"},
      {"local header size 0 without a data descriptor",
       edited(base, [&](std::string& s) { put<uint32_t>(s, l.entries[1].header_offset + 22, 0); }),
       "gives size 0, compressed size 300"},
      {"local header CRC differs", edited(base, [&](std::string& s) { s[l.entries[1].header_offset + 14] ^= 1; }),
       "; the central directory 300, 300"},
      {"data descriptor flag without a descriptor",
       edited(base,
              [&](std::string& s) {
                put<uint16_t>(s, l.central[1] + 8, 8);
                put<uint16_t>(s, l.entries[1].header_offset + 6, 8);
              }),
       "record 'archive/data/0': the data descriptor at offset " + std::to_string(l.entries[1].data_offset + 300) +
           " (signature 0x04034b50"},
      {"torch.save's data descriptor with another CRC",
       edited(real, [&](std::string& s) { s[lr.entries[1].data_offset + lr.entries[1].size + 4] ^= 1; }),
       "the data descriptor at offset " + std::to_string(lr.entries[1].data_offset + lr.entries[1].size)},
      {"torch.save's data descriptor with another size",
       edited(real, [&](std::string& s) { s[lr.entries[1].data_offset + lr.entries[1].size + 12] ^= 1; }),
       "does not match the central directory"},
      // One more than the record's size: torch 2.x's second record (.format_version) holds 1 byte.
      {"torch.save's local header with a size that differs",
       edited(real,
              [&](std::string& s) {
                put<uint32_t>(s, lr.entries[1].header_offset + 22, static_cast<uint32_t>(lr.entries[1].size + 1));
              }),
       "gives size " + std::to_string(lr.entries[1].size + 1)},
      {"an entry marked as a DOS folder",
       edited(base, [&](std::string& s) { put<uint32_t>(s, l.central[1] + 38, 0x10); }),
       "record 'archive/data/0' is marked as a folder (attributes 0x00000010)"},
      {"a patch entry",
       edited(base,
              [&](std::string& s) {
                put<uint16_t>(s, l.central[1] + 8, 0x20);
                put<uint16_t>(s, l.entries[1].header_offset + 6, 0x20);
              }),
       "record 'archive/data/0' is a patch"},
      {"stray bytes after the local extra fields",
       edited(base,
              [&](std::string& s) {
                const uint64_t fb = l.entries[1].header_offset + 30 + l.entries[1].name.size();
                put<uint16_t>(s, fb + 2, get16(s, fb + 2) - 1);
              }),
       "record 'archive/data/0' has a malformed extra field in its local header (1 stray bytes at its end)"},
      {"a central size of 0xFFFFFFFF without a ZIP64 field",
       edited(base,
              [&](std::string& s) {
                put<uint32_t>(s, l.central[1] + 20, 0xFFFFFFFFu);
                put<uint32_t>(s, l.central[1] + 24, 0xFFFFFFFFu);
              }),
       "record 'archive/data/0' has no ZIP64 extra field for its size of 0xffffffff"},
      {"disk number 0xFFFF", edited(base, [&](std::string& s) { put<uint16_t>(s, l.central[1] + 34, 0xFFFF); }),
       "record 'archive/data/0' is on disk 65535"},
  };
  for (const bad_case& c : cases) {
    INFO("case: " << c.name);
    expect_rejected(c.bytes, c.message);
  }

  // The last valid neighbours of the cases above.
  const std::vector<std::pair<std::string, std::string>> accepted = {
      {"a comment that ends the file", with_comment(base, "abcdef")},
      {"a comment of 65535 bytes", with_comment(base, std::string(65535, 'c'))},
      {"a comment with a signature's first 3 bytes", with_comment(base, std::string("xxPK\x05\x05yy", 8))},
      {"torch.save's end record with ZIP64 sentinels", edited(real,
                                                              [&](std::string& s) {
                                                                put<uint16_t>(s, lr.eocd + 8, 0xFFFF);
                                                                put<uint16_t>(s, lr.eocd + 10, 0xFFFF);
                                                                put<uint32_t>(s, lr.eocd + 12, 0xFFFFFFFFu);
                                                                put<uint32_t>(s, lr.eocd + 16, 0xFFFFFFFFu);
                                                              })},
      {"names that differ in more than case", renamed(base, 2, "archive/DATA/1")},
      {"non-ASCII with the UTF-8 flag", renamed(base, 2, "archive/d\xc3\xa9ta1", 0x800)},
      {"a 4-byte UTF-8 character", renamed(base, 2,
                                           "archive/\xf0\x9f\x98\x80"
                                           "a1",
                                           0x800)},
      {"a '...' component", renamed(base, 2, "archive/.../11")},
      {"a colon later in the name", renamed(base, 2, "archive/da:a/1")},
  };
  for (const auto& [name, bytes] : accepted) {
    INFO("case: " << name);
    zip_reader r(u8(bytes), bytes.size(), "ok.pt");
    CHECK(r.entries().size() >= 4);
  }
  (void)real_locator;
}

TEST_CASE("name lengths: 511 bytes read, 512 refused", "[zip]") {
  temp_dir dir;
  for (size_t length : {size_t{511}, size_t{512}}) {
    const std::string name = "archive/" + std::string(length - 8, 'n');
    const std::string bytes = write_archive(dir / "long.pt", {{name, "x"}, {"archive/version", "3\n"}}, false);
    INFO("length " << length);
    if (length == 511) {
      zip_reader r(u8(bytes), bytes.size(), "long.pt");
      CHECK(r.find(name) != nullptr);
    } else {
      expect_rejected(bytes, "has a name of 512 bytes (at most 511");
    }
  }
}

TEST_CASE("find() matches exactly, and refuses a name that matches only ignoring case", "[zip]") {
  temp_dir dir;
  const std::string bytes = renamed(small_archive(dir, false), 3, "archive/VERSION");
  zip_reader r(u8(bytes), bytes.size(), "case.pt");
  CHECK(r.find("archive/VERSION") == &r.entries()[3]);
  CHECK(r.find("archive/versio") == nullptr);
  CHECK(r.find("archive/version0") == nullptr);
  CHECK_THROWS_WITH(r.find("archive/version"),
                    Catch::StartsWith("case.pt: record 'archive/version' is named 'archive/VERSION' in the archive"));
  CHECK_THROWS_AS(r.stored("archive/Version"), input_error);
  CHECK(&r.stored("archive/data.pkl") == &r.entries()[0]);
}

TEST_CASE("a directory entry's comment counts in its size: the last that fits, one byte more refused", "[zip]") {
  temp_dir dir;
  const std::string base = small_archive(dir, false);
  const layout l(base);
  const uint64_t last = l.central[3];
  const uint64_t cd_end = l.eocd;  // no comment anywhere yet: the directory ends at the end record
  const uint64_t entry = cd_end - last;
  REQUIRE(entry == 46 + 15);  // "archive/version", no extra field

  // A 5-byte comment on the last entry, the directory grown by those 5 bytes: read.
  std::string commented = base;
  put<uint16_t>(commented, last + 32, 5);
  commented.insert(cd_end, "hello");
  put<uint32_t>(commented, cd_end + 5 + 12, get32(base, l.eocd + 12) + 5);
  CHECK(zip_reader(u8(commented), commented.size(), "ok.pt").entries().size() == 4);

  // One byte more comment than the directory holds.
  std::string over = commented;
  put<uint16_t>(over, last + 32, 6);
  try {
    zip_reader(u8(over), over.size(), "bad.pt");
    FAIL("accepted");
  } catch (const input_error& e) {
    CHECK(std::string(e.what()) == "bad.pt: truncated central directory: entry 4 of 4 at offset " +
                                       std::to_string(last) + " needs " + std::to_string(entry + 6) +
                                       " bytes but the directory ends at offset " + std::to_string(cd_end + 5));
  }
}
