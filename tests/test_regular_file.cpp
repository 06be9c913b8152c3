#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "support.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/read_file.h"
#include "util/regular_file.h"

using namespace swavg;
using namespace swavg::test;

namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct special_case {
  std::string path;
  const char* found;
};

}  // namespace

TEST_CASE("regular_file opens regular files and refuses the rest before reading", "[regular_file]") {
  temp_dir d;
  write_file(d / "f", "abc");
  const regular_file f = regular_file::open(d / "f");
  CHECK(f.fd() >= 0);
  CHECK(f.status().st_size == 3);
  CHECK(f.path() == d / "f");
  REQUIRE(::mkfifo((d / "fifo").c_str(), 0644) == 0);  // no writer: a blocking open would wait forever
  ::mkdir((d / "dir").c_str(), 0755);
  for (const special_case& c : std::vector<special_case>{
           {d / "fifo", "a FIFO"}, {"/dev/zero", "a device"}, {"/dev/null", "a device"}, {d / "dir", "a directory"}}) {
    INFO(c.path);
    exit_code code = exit_code::ok;
    CHECK_THAT(error_of([&] { regular_file::open(c.path); }, &code),
               Catch::Contains(c.path + ": expected a regular file but it is " + c.found));
    CHECK(code == exit_code::bad_input);
    // Every reader goes through it.
    CHECK_THROWS_AS(read_text_file(c.path), input_error);
    CHECK_THROWS_AS(read_chunks(c.path, 16, [](const char*, size_t) { return true; }), input_error);
    CHECK_THROWS_AS(mapped_file::open(c.path), input_error);
  }
  exit_code code = exit_code::ok;
  CHECK_THAT(error_of([&] { regular_file::open(d / "missing"); }, &code), Catch::Contains("cannot open"));
  CHECK(code == exit_code::io);
  REQUIRE(::symlink("missing", (d / "dangling").c_str()) == 0);
  CHECK_THAT(error_of([&] { regular_file::open(d / "dangling"); }), Catch::Contains("dangling symbolic link"));
  REQUIRE(::symlink("f", (d / "link").c_str()) == 0);
  CHECK(read_text_file(d / "link") == "abc");  // a link to a regular file is that file
}

TEST_CASE("regular_file: a path swapped for a FIFO or a folder after the stat is refused on the descriptor",
          "[regular_file]") {
  temp_dir d;
  static std::string swap_to;  // what the hook puts in the path's place: "fifo" or "dir"
  const auto swap = [](const std::string& path) {
    REQUIRE(::unlink(path.c_str()) == 0);
    if (swap_to == "fifo") REQUIRE(::mkfifo(path.c_str(), 0644) == 0);  // no writer: a blocking open would hang
    if (swap_to == "dir") REQUIRE(::mkdir(path.c_str(), 0755) == 0);
  };
  for (const char* kind : {"fifo", "dir"}) {
    INFO(kind);
    swap_to = kind;
    write_file(d / kind, "abc");
    regular_file::between_stat_and_open = swap;
    exit_code code = exit_code::ok;
    const std::string message = error_of([&] { regular_file::open(d / kind); }, &code);
    regular_file::between_stat_and_open = nullptr;
    CHECK_THAT(message, Catch::Contains(d / kind + ": expected a regular file but it is " +
                                        (swap_to == "fifo" ? "a FIFO" : "a directory")));
    CHECK(code == exit_code::bad_input);
  }
  write_file(d / "f", "abc");
  regular_file::between_stat_and_open = [](const std::string&) {};
  CHECK(regular_file::open(d / "f").status().st_size == 3);  // nothing swapped: opened
  regular_file::between_stat_and_open = nullptr;
}

TEST_CASE("read_text_file's default limit is 64 MiB", "[regular_file]") {
  temp_dir d;
  write_file(d / "big", std::string(67108864, 'x'));
  CHECK(read_text_file(d / "big").size() == 67108864);
  write_file(d / "big", std::string(67108865, 'x'));
  CHECK_THAT(error_of([&] { read_text_file(d / "big"); }), Catch::Contains("larger than 67108864 bytes"));
}
