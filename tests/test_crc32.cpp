// CRC-32 (util/crc32.cpp): crc32_update, and each of its two code paths alone (slice-by-16 and
// carry-less multiplication), against the bitwise definition, streamed in pieces of any size.
#include <catch2/catch.hpp>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "util/crc32.h"

using namespace swavg;

namespace {

const uint8_t* u8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

std::string pattern_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

uint32_t crc32_reference(const uint8_t* p, size_t n) {
  uint32_t crc = 0xFFFFFFFF;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
  }
  return ~crc;
}

}  // namespace

TEST_CASE("crc32 matches the bitwise definition", "[crc32]") {
  CHECK(crc32_update(0, "", 0) == 0);
  CHECK(crc32_update(0, "123456789", 9) == 0xCBF43926u);
  CHECK(crc32_update(0, "The quick brown fox jumps over the lazy dog", 43) == 0x414FA339u);

  const std::string buf = pattern_bytes(70000, 7);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (size_t n : {1000u, 4095u, 4096u, 4097u, 65536u, 69990u}) lengths.push_back(n);
  for (size_t n : lengths) {
    for (size_t start : {0u, 1u, 3u, 7u}) {
      if (start + n > buf.size()) continue;
      const uint8_t* p = u8(buf) + start;
      INFO("length " << n << " at " << start);
      REQUIRE(crc32_update(0, p, n) == crc32_reference(p, n));
    }
  }

  std::mt19937 rng(11);
  for (int round = 0; round < 50; ++round) {
    uint32_t crc = 0;
    size_t at = 0;
    while (at < buf.size()) {
      size_t n = std::min<size_t>(rng() % 5000, buf.size() - at);
      crc = crc32_update(crc, u8(buf) + at, n);
      at += n;
    }
    REQUIRE(crc == crc32_update(0, buf.data(), buf.size()));
  }
}

TEST_CASE("slice-by-16 and carry-less multiplication each match the bitwise definition", "[crc32]") {
  const std::string buf = pattern_bytes(20000, 13);
  // Both sides of the 16-byte blocks and of the 64-byte minimum of the carry-less path.
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 300; ++n) lengths.push_back(n);
  for (size_t n : {1023u, 1024u, 1025u, 4111u, 19990u}) lengths.push_back(n);
  for (size_t n : lengths) {
    for (size_t start : {0u, 1u, 5u, 15u}) {
      if (start + n > buf.size()) continue;
      const uint8_t* p = u8(buf) + start;
      const uint32_t want = crc32_reference(p, n);
      INFO("length " << n << " at " << start);
      REQUIRE(crc32_slice_by_16(0, p, n) == want);
      REQUIRE(crc32_clmul(0, p, n) == want);
      REQUIRE(crc32_update(0, p, n) == want);
    }
  }
  // Continuing a CRC from either path with the other.
  std::mt19937 rng(17);
  for (int round = 0; round < 50; ++round) {
    uint32_t crc = 0;
    size_t at = 0;
    bool clmul = round % 2 == 0;
    while (at < buf.size()) {
      const size_t n = std::min<size_t>(rng() % 700, buf.size() - at);
      crc = clmul ? crc32_clmul(crc, u8(buf) + at, n) : crc32_slice_by_16(crc, u8(buf) + at, n);
      clmul = !clmul;
      at += n;
    }
    REQUIRE(crc == crc32_reference(u8(buf), buf.size()));
  }
}

TEST_CASE("the carry-less path is there where the CPU has it", "[crc32]") {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  CHECK(crc32_clmul_available() == (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")));
#else
  CHECK_FALSE(crc32_clmul_available());
#endif
  // All ones and all zeros, long enough for the carry-less path: known values.
  const std::string zeros(4096, '\0'), ones(4096, '\xff');
  CHECK(crc32_update(0, zeros.data(), zeros.size()) == crc32_reference(u8(zeros), zeros.size()));
  CHECK(crc32_update(0, ones.data(), ones.size()) == crc32_reference(u8(ones), ones.size()));
  CHECK(crc32_clmul(0, zeros.data(), zeros.size()) == crc32_slice_by_16(0, zeros.data(), zeros.size()));
}
