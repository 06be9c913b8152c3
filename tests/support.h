// Helpers shared by the unit tests: fixture paths, manifests written by Python, strided bytes, byte
// tensors for the output planners, a temporary folder.
#pragma once

#include <dirent.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "formats/core/output_sink.h"
#include "tensor/tensor_view.h"
#include "util/error.h"

namespace swavg::test {

inline std::string fixture(const std::string& name) { return std::string(SWAVG_FIXTURES_DIR) + "/" + name; }

// A tensor of `elements` bytes (uint8, one dimension), as the output planners are given it.
inline tensor_spec byte_spec(const std::string& name, int64_t elements) {
  return tensor_spec{name, dtype::uint8, {elements}, {}};
}

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path + " (run scripts/make_fixtures.py first)");
  return nlohmann::json::parse(in);
}

// The view's elements in row-major order, gathered through its strides.
inline std::string row_major_bytes(const tensor_view& v) {
  const size_t item = itemsize(v.type);
  std::string out;
  if (v.pieces) {  // assembled from its pieces (tests/test_tensor_view.cpp checks that)
    out.resize(v.nbytes());
    gather_contiguous(v, out.data());
    return out;
  }
  out.reserve(v.nbytes());
  const int64_t n = v.numel();
  std::vector<int64_t> index(v.shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t element = v.offset;
    for (size_t d = 0; d < index.size(); ++d) element += index[d] * v.strides[d];
    out.append(reinterpret_cast<const char*>(v.storage) + element * item, item);
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < v.shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

// The message of the swavg::error `f` throws ("" when it throws none), and its exit code.
inline std::string error_of(const std::function<void()>& f, swavg::exit_code* code = nullptr) {
  try {
    f();
  } catch (const swavg::error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

// The bytes of the mapping holding `p` that this process has resident (its Rss in /proc/self/smaps).
inline uint64_t resident_bytes_of_mapping(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find('-') < line.find(' '))
      inside = lo <= at && at < hi;
    unsigned long long kb = 0;
    if (inside && std::sscanf(line.c_str(), "Rss: %llu kB", &kb) == 1) return kb * 1024;
  }
  throw std::runtime_error("no mapping holds the address");
}

// A folder under $TMPDIR (or /tmp), removed with what is in it.
class temp_dir {
 public:
  temp_dir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/swavg_test.XXXXXX";
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    if (DIR* d = ::opendir(path_.c_str())) {
      while (const dirent* e = ::readdir(d))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.push_back(e->d_name);
      ::closedir(d);
    }
    return names;
  }

 private:
  std::string path_;
};

}  // namespace swavg::test
