/*
 * Overflow-checked arithmetic on sizes read from untrusted files, and little-endian loads from
 * unaligned bytes. Every size, offset and count taken from a file goes through these.
 */
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>

namespace swavg {

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// True when [offset, offset + length) lies inside [0, total).
inline bool range_inside(uint64_t offset, uint64_t length, uint64_t total) {
  return offset <= total && length <= total - offset;
}

template <typename T>
inline T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;  // all supported hosts are little-endian (checked in CMake)
}

template <typename T>
inline void store_le(uint8_t* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace swavg
