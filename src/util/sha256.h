/*
 * SHA-256 (FIPS 180-4), streamed: the manifests of shard-parallel workers record each file's digest,
 * computed while the file is written so that no file is read twice.
 */
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace swavg {

class sha256 {
 public:
  sha256();
  void update(const void* data, uint64_t size);
  // The digest as 64 lowercase hex digits; the object is spent afterwards.
  std::string hex_digest();

 private:
  void block(const uint8_t* p);
  std::array<uint32_t, 8> h_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes so far
};

// The digest of a whole file, read in chunks (io_error when it cannot be read).
std::string sha256_file(const std::string& path);

}  // namespace swavg
