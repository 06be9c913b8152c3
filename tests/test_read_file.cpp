#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <string>

#include "util/error.h"
#include "util/read_file.h"

using namespace swavg;

namespace {

std::string write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

}  // namespace

TEST_CASE("read_text_file takes a file of max_size bytes and refuses one byte more", "[read_file]") {
  const std::string path = write_file("read_file_edge.txt", std::string(1000, 'x'));
  CHECK(read_text_file(path, 1000) == std::string(1000, 'x'));  // the last valid size
  CHECK_THROWS_AS(read_text_file(path, 999), input_error);      // the first invalid one
  CHECK_THROWS_WITH(read_text_file(path, 999), Catch::Contains("larger than 999 bytes"));
  // Past a read's piece (64 KiB) too: the size counts across pieces.
  write_file(path, std::string(65536 * 2 + 1, 'y'));
  CHECK(read_text_file(path, 65536 * 2 + 1).size() == 65536 * 2 + 1);
  CHECK_THROWS_AS(read_text_file(path, 65536 * 2), input_error);
  ::unlink(path.c_str());
  CHECK_THROWS_AS(read_text_file(path), io_error);
}

TEST_CASE("read_chunks hands over pieces in order and stops when asked", "[read_file]") {
  std::string bytes;
  for (int i = 0; i < 1000; ++i) bytes += static_cast<char>(i * 7);
  const std::string path = write_file("read_file_chunks.bin", bytes);
  std::string got;
  size_t calls = 0;
  read_chunks(path, 64, [&](const char* data, size_t n) {
    CHECK(n <= 64);
    got.append(data, n);
    ++calls;
    return true;
  });
  CHECK(got == bytes);
  CHECK(calls == 16);  // 15 full pieces and the last 40 bytes
  calls = 0;
  read_chunks(path, 64, [&](const char*, size_t) { return ++calls < 3; });
  CHECK(calls == 3);
  ::unlink(path.c_str());
}
