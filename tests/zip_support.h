// Helpers shared by the ZIP reader and writer tests (test_zip_reader.cpp, test_zip_writer.cpp):
// temporary folders, Python runs, archives written with zip_writer, and where their records lie.
#pragma once

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "formats/zip/zip_reader.h"
#include "formats/zip/zip_writer.h"
#include "util/atomic_file.h"
#include "util/checked.h"
#include "util/error.h"

#ifndef SWAVG_PYTHON
#define SWAVG_PYTHON "/usr/bin/python3"
#endif

namespace swavg::zip_test {

namespace fs = std::filesystem;

inline std::string fixture(const std::string& relative) { return std::string(SWAVG_FIXTURES_DIR) + "/" + relative; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

inline const uint8_t* u8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

struct temp_dir {
  temp_dir() {
    std::string pattern = (fs::temp_directory_path() / "swavg-test-zip-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return path + "/" + name; }
  std::string path;
};

// Runs a Python script with arguments; returns its exit status, stdout and stderr in `output`.
inline int run_python(const temp_dir& dir, const std::string& script, const std::string& args, std::string& output) {
  const std::string script_path = dir / "script.py";
  const std::string out_path = dir / "script.out";
  write_file(script_path, script);
  const std::string cmd = std::string(SWAVG_PYTHON) + " '" + script_path + "' " + args + " > '" + out_path + "' 2>&1";
  int status = std::system(cmd.c_str());
  output = read_file(out_path);
  return status;
}

struct record_spec {
  std::string name;
  std::string bytes;
  bool streamed = false;
};

// Writes the records with zip_writer through an atomic_file and returns the file's bytes.
inline std::string write_archive(const std::string& path, const std::vector<record_spec>& records, bool force_zip64) {
  atomic_file f(path);
  zip_writer w(f, force_zip64);
  for (const record_spec& r : records) {
    if (!r.streamed) {
      w.add(r.name, r.bytes.data(), r.bytes.size());
      continue;
    }
    w.begin_record(r.name, r.bytes.size());
    size_t chunk = 1;
    for (size_t at = 0; at < r.bytes.size();) {
      size_t n = std::min(chunk, r.bytes.size() - at);
      w.write(r.bytes.data() + at, n);
      at += n;
      chunk = chunk * 3 + 1;
    }
    w.end_record();
  }
  w.finish();
  f.commit();
  return read_file(path);
}

inline std::string pattern_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

inline uint16_t get16(const std::string& s, uint64_t at) { return load_le<uint16_t>(u8(s) + at); }
inline uint32_t get32(const std::string& s, uint64_t at) { return load_le<uint32_t>(u8(s) + at); }
inline uint64_t get64(const std::string& s, uint64_t at) { return load_le<uint64_t>(u8(s) + at); }
template <typename T>
inline void put(std::string& s, uint64_t at, T v) {
  store_le(reinterpret_cast<uint8_t*>(&s[at]), v);
}

// Where things are in an archive the tests build: the end records and each central entry.
struct layout {
  uint64_t eocd = 0;
  uint64_t end64 = 0;  // 0 without ZIP64
  uint64_t cd_offset = 0;
  std::vector<uint64_t> central;  // offset of each central directory entry
  std::vector<zip_entry> entries;

  explicit layout(const std::string& s) {
    eocd = s.size() - 22;
    REQUIRE(get32(s, eocd) == 0x06054b50);
    cd_offset = get32(s, eocd + 16);
    uint64_t count = get16(s, eocd + 10);
    if (eocd >= 20 && get32(s, eocd - 20) == 0x07064b50) {
      end64 = get64(s, eocd - 20 + 8);
      cd_offset = get64(s, end64 + 48);
      count = get64(s, end64 + 32);
    }
    uint64_t p = cd_offset;
    for (uint64_t i = 0; i < count; ++i) {
      REQUIRE(get32(s, p) == 0x02014b50);
      central.push_back(p);
      p += 46 + get16(s, p + 28) + get16(s, p + 30) + get16(s, p + 32);
    }
    entries = zip_reader(u8(s), s.size(), "layout").entries();
  }
  uint64_t extra(const std::string& s, size_t i) const { return central[i] + 46 + get16(s, central[i] + 28); }
};

inline std::vector<record_spec> small_records() {
  return {{"archive/data.pkl", pattern_bytes(100, 1)},
          {"archive/data/0", pattern_bytes(300, 2)},
          {"archive/data/1", pattern_bytes(50, 3)},
          {"archive/version", "3\n"}};
}

inline std::string small_archive(const temp_dir& dir, bool zip64) {
  return write_archive(dir / (zip64 ? "small64.zip" : "small.zip"), small_records(), zip64);
}

// Parses `bytes` and expects input_error whose message starts with the context and contains `what`.
inline void expect_rejected(const std::string& bytes, const std::string& what) {
  try {
    zip_reader r(u8(bytes), bytes.size(), "bad.pt");
    FAIL_CHECK("accepted; expected an error containing \"" << what << "\"");
  } catch (const input_error& e) {
    const std::string msg = e.what();
    INFO("message: " << msg);
    CHECK(msg.rfind("bad.pt: ", 0) == 0);
    CHECK(msg.find(what) != std::string::npos);
    CHECK(e.code() == exit_code::bad_input);
  }
}

// Parsing either succeeds or throws input_error, and everything handed out lies inside the bytes.
inline void parse_survives(const std::string& bytes) {
  try {
    zip_reader r(u8(bytes), bytes.size(), "fuzz");
    for (const zip_entry& e : r.entries()) {
      REQUIRE(range_inside(e.data_offset, e.compressed_size, bytes.size()));
      REQUIRE(r.find(e.name) == &e);
    }
    try {
      (void)r.root();
    } catch (const input_error&) {
    }
  } catch (const input_error&) {
  }
}

}  // namespace swavg::zip_test
