/*
 * Reading a file front to back with read(2), for what is not memory-mapped: small records (plans,
 * manifests, rules) and files only streamed through (hashed, copied). Both open through
 * util/regular_file.h: a FIFO or a device named here is refused, never read.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "util/regular_file.h"

namespace swavg {

// Hands `take` the file's bytes in pieces of at most `chunk` bytes, in order, until the end or until
// `take` returns false. io_error when the file cannot be opened or read.
void read_chunks(const std::string& path, size_t chunk, const std::function<bool(const char*, size_t)>& take);

// A small file's contents (io_error when missing or unreadable, input_error when not a regular file
// or past `max_size`, checked before the first read). With open_mode::streams_too a pipe or a
// device is read too, up to `max_size` bytes (/dev/zero is refused once it passes them).
std::string read_text_file(const std::string& path, uint64_t max_size = 64 << 20,
                           open_mode mode = open_mode::regular_only);

}  // namespace swavg
