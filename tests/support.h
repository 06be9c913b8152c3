// Helpers shared by the unit tests: fixture paths, manifests written by Python, strided bytes.
#pragma once

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tensor/tensor_view.h"

namespace swavg::test {

inline std::string fixture(const std::string& name) { return std::string(SWAVG_FIXTURES_DIR) + "/" + name; }

inline nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path + " (run scripts/make_fixtures.py first)");
  return nlohmann::json::parse(in);
}

// The view's elements in row-major order, gathered through its strides.
inline std::string row_major_bytes(const tensor_view& v) {
  const size_t item = itemsize(v.type);
  std::string out;
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

}  // namespace swavg::test
