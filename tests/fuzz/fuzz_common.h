/*
 * Shared by the fuzz targets. Each target defines LLVMFuzzerTestOneInput and lets only swavg::error
 * (a clean refusal with an exit code) escape its parser: any other exception would reach main() as
 * an "internal error" and is a bug, so it propagates and the fuzzer reports it as a crash. Views a
 * reader hands out are checked against the input's bytes and every byte they reach is read, so
 * AddressSanitizer sees any bounds check that is missing.
 */
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "tensor/state_dict.h"

namespace swavg::fuzz {

[[noreturn]] inline void die(const char* what) {
  std::fprintf(stderr, "fuzz target invariant broken: %s\n", what);
  std::abort();
}

// The input as a string (data may be null when size is 0).
inline std::string bytes(const uint8_t* data, size_t size) {
  return size ? std::string(reinterpret_cast<const char*>(data), size) : std::string();
}

// Reads every byte the view reaches (at most `budget` elements, to keep runs fast) after checking
// that its whole extent lies inside [begin, end). Returns a value the optimiser cannot drop.
inline uint64_t touch_view(const tensor_view& v, const uint8_t* begin, const uint8_t* end, int64_t budget = 1 << 16) {
  if (v.shape.size() != v.strides.size()) die("shape and strides differ in length");
  if (v.offset < 0) die("negative offset handed out");
  const uint64_t item = itemsize(v.type);
  uint64_t numel = 1, last = static_cast<uint64_t>(v.offset);
  for (size_t d = 0; d < v.shape.size(); ++d) {
    if (v.shape[d] < 0 || v.strides[d] < 0) die("negative size or stride handed out");
    numel *= static_cast<uint64_t>(v.shape[d]);
  }
  if (numel == 0) return 0;
  for (size_t d = 0; d < v.shape.size(); ++d)
    last += static_cast<uint64_t>(v.shape[d] - 1) * static_cast<uint64_t>(v.strides[d]);
  if ((last + 1) * item > v.storage_bytes) die("view reaches past its storage");
  if (v.storage < begin || v.storage > end || v.storage_bytes > static_cast<uint64_t>(end - v.storage))
    die("storage lies outside the input");
  // Walk the elements in row-major order through the strides.
  uint64_t sum = 0;
  std::vector<int64_t> index(v.shape.size(), 0);
  for (int64_t i = 0; i < static_cast<int64_t>(numel) && i < budget; ++i) {
    uint64_t element = static_cast<uint64_t>(v.offset);
    for (size_t d = 0; d < index.size(); ++d) element += static_cast<uint64_t>(index[d] * v.strides[d]);
    const uint8_t* p = v.storage + element * item;
    for (uint64_t b = 0; b < item; ++b) sum += p[b];
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < v.shape[d]) break;
      index[d] = 0;
    }
  }
  // The last element too, whatever the budget.
  const uint8_t* p = v.storage + last * item;
  for (uint64_t b = 0; b < item; ++b) sum += p[b];
  return sum;
}

}  // namespace swavg::fuzz
