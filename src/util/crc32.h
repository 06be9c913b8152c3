/*
 * CRC-32 (ISO-HDLC, the checksum of ZIP records), streamed. Blocks of 64 bytes and more go through
 * carry-less multiplication on x86-64 CPUs with PCLMULQDQ (cpuid), the rest through slice-by-16
 * tables; both give the same checksums. The ZIP writer computes it while streaming records, the
 * TorchScript reader and the tests to check records.
 */
#pragma once

#include <cstdint>

namespace swavg {

// CRC-32 of `size` bytes, continuing from `crc` (0 to start).
uint32_t crc32_update(uint32_t crc, const void* data, uint64_t size);

// The two code paths alone, for the tests and the differential fuzz target; crc32_update takes
// crc32_clmul where crc32_clmul_available(), else crc32_slice_by_16.
uint32_t crc32_slice_by_16(uint32_t crc, const void* data, uint64_t size);
// True on x86-64 CPUs with PCLMULQDQ and SSE4.1, in a build that has the carry-less path.
bool crc32_clmul_available();
// Carry-less multiplication over the whole 16-byte blocks of an input of 64 bytes or more,
// slice-by-16 for the rest (and for shorter inputs). Without crc32_clmul_available(), slice-by-16.
uint32_t crc32_clmul(uint32_t crc, const void* data, uint64_t size);

}  // namespace swavg
