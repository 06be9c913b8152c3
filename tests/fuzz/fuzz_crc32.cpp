// libFuzzer target: CRC-32 differential. crc32_update, slice-by-16 and carry-less multiplication
// (where the CPU has it) must give the bitwise definition's checksum for any bytes, whole or
// continued across a split point taken from the input, each half through either path.
#include <cstddef>
#include <cstdint>

#include "fuzz_common.h"
#include "util/crc32.h"

namespace {

uint32_t bitwise(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
  }
  return ~crc;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace swavg;
  static const uint8_t kEmpty = 0;
  if (!data) data = &kEmpty;
  const uint32_t want = bitwise(0, data, size);
  if (crc32_slice_by_16(0, data, size) != want) fuzz::die("slice-by-16 differs from the bitwise CRC");
  if (crc32_clmul(0, data, size) != want) fuzz::die("carry-less multiplication differs from the bitwise CRC");
  if (crc32_update(0, data, size) != want) fuzz::die("crc32_update differs from the bitwise CRC");
  // A split point from the first two bytes; the halves through each pair of paths.
  const size_t split = size < 2 ? 0 : (static_cast<size_t>(data[0]) << 8 | data[1]) % (size + 1);
  const uint8_t* rest = data + split;
  const size_t n = size - split;
  if (crc32_clmul(crc32_slice_by_16(0, data, split), rest, n) != want) fuzz::die("slice-by-16 then carry-less differs");
  if (crc32_slice_by_16(crc32_clmul(0, data, split), rest, n) != want) fuzz::die("carry-less then slice-by-16 differs");
  if (crc32_update(bitwise(0, data, split), rest, n) != want) fuzz::die("crc32_update continuing a CRC differs");
  return 0;
}
