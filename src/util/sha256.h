/*
 * SHA-256 (FIPS 180-4), for naming a file by its contents: the resume record of an average made
 * with --avg-fn FILE stores the function file's digest, so that a resume with another function is
 * refused. Streams the file through its mapping; nothing is held but the 32-byte state.
 */
#pragma once

#include <cstdint>
#include <string>

namespace swavg {

// Lower-case hex digest of `size` bytes at `data`.
std::string sha256_hex(const void* data, uint64_t size);

// Digest of a whole file. Throws io_error for a missing or unreadable file.
std::string sha256_of_file(const std::string& path);

}  // namespace swavg
