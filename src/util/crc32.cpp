// CRC-32: the slice-by-16 tables, the carry-less multiplication path and the choice between them.
#include "util/crc32.h"

#include <array>
#include <cstddef>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define SWAVG_CRC32_CLMUL 1
#endif

#include "util/checked.h"

namespace swavg {
namespace {

using crc_tables = std::array<std::array<uint32_t, 256>, 16>;

constexpr crc_tables make_crc_tables() {
  crc_tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i)
    for (size_t k = 1; k < 16; ++k) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff];
  return t;
}

constexpr crc_tables kCrcTables = make_crc_tables();

uint32_t crc32_tables(uint32_t crc, const uint8_t* p, uint64_t size) {
  const auto& t = kCrcTables;
  crc = ~crc;
  while (size >= 16) {
    uint32_t a = load_le<uint32_t>(p) ^ crc;
    uint32_t b = load_le<uint32_t>(p + 4);
    uint32_t c = load_le<uint32_t>(p + 8);
    uint32_t d = load_le<uint32_t>(p + 12);
    crc = t[15][a & 0xff] ^ t[14][(a >> 8) & 0xff] ^ t[13][(a >> 16) & 0xff] ^ t[12][a >> 24] ^ t[11][b & 0xff] ^
          t[10][(b >> 8) & 0xff] ^ t[9][(b >> 16) & 0xff] ^ t[8][b >> 24] ^ t[7][c & 0xff] ^ t[6][(c >> 8) & 0xff] ^
          t[5][(c >> 16) & 0xff] ^ t[4][c >> 24] ^ t[3][d & 0xff] ^ t[2][(d >> 8) & 0xff] ^ t[1][(d >> 16) & 0xff] ^
          t[0][d >> 24];
    p += 16;
    size -= 16;
  }
  while (size-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xff];
  return ~crc;
}

#ifdef SWAVG_CRC32_CLMUL
constexpr uint64_t kClmulMin = 64;

#define SWAVG_CLMUL_TARGET __attribute__((target("pclmul,sse4.1")))

SWAVG_CLMUL_TARGET inline __m128i load128(const uint8_t* q) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(q));
}

SWAVG_CLMUL_TARGET inline __m128i fold128(__m128i x, __m128i k, __m128i next) {
  return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)), next);
}

// Folds 64 bytes at a time with carry-less multiplication (Intel, "Fast CRC Computation for
// Generic Polynomials Using PCLMULQDQ"), then Barrett-reduces to 32 bits. `size` is a multiple of
// 16 and at least 64; `state` is the inverted running CRC, and so is the result.
SWAVG_CLMUL_TARGET uint32_t fold_clmul(uint32_t state, const uint8_t* p, uint64_t size) {
  const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4);
  const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
  const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124);
  const __m128i poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
  const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);

  __m128i x1 = _mm_xor_si128(load128(p), _mm_cvtsi32_si128(static_cast<int>(state)));
  __m128i x2 = load128(p + 16), x3 = load128(p + 32), x4 = load128(p + 48);
  p += 64;
  size -= 64;
  while (size >= 64) {
    x1 = fold128(x1, k1k2, load128(p));
    x2 = fold128(x2, k1k2, load128(p + 16));
    x3 = fold128(x3, k1k2, load128(p + 32));
    x4 = fold128(x4, k1k2, load128(p + 48));
    p += 64;
    size -= 64;
  }
  x1 = fold128(x1, k3k4, x2);
  x1 = fold128(x1, k3k4, x3);
  x1 = fold128(x1, k3k4, x4);
  while (size >= 16) {
    x1 = fold128(x1, k3k4, load128(p));
    p += 16;
    size -= 16;
  }

  x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), x2);
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, low32), poly, 0x00);
  return static_cast<uint32_t>(_mm_extract_epi32(_mm_xor_si128(x1, x2), 1));
}

bool have_clmul() {
  static const bool yes = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
  return yes;
}
#endif

}  // namespace

uint32_t crc32_slice_by_16(uint32_t crc, const void* data, uint64_t size) {
  return crc32_tables(crc, static_cast<const uint8_t*>(data), size);
}

bool crc32_clmul_available() {
#ifdef SWAVG_CRC32_CLMUL
  return have_clmul();
#else
  return false;
#endif
}

uint32_t crc32_clmul(uint32_t crc, const void* data, uint64_t size) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
#ifdef SWAVG_CRC32_CLMUL
  if (size >= kClmulMin && have_clmul()) {
    const uint64_t bulk = size & ~uint64_t{15};
    crc = ~fold_clmul(~crc, p, bulk);
    p += bulk;
    size -= bulk;
  }
#endif
  return crc32_tables(crc, p, size);
}

uint32_t crc32_update(uint32_t crc, const void* data, uint64_t size) { return crc32_clmul(crc, data, size); }

}  // namespace swavg
