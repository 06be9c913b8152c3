// The SIGBUS guard of mapped files and the checks that an input did not change while mapped: a
// truncated mapping reads zeros and is flagged instead of killing the process; a same-size rewrite,
// a replaced file and a write() from a truncated mapping are all "changed while being read"; faults
// outside guarded mappings still kill as before.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fmt/format.h>
#include <functional>
#include <fstream>
#include <string>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "support.h"

using namespace swavg;
namespace fs = std::filesystem;

namespace {

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

struct temp_folder {
  fs::path path;
  temp_folder() {
    char name[] = "/tmp/swavg-mapped-XXXXXX";
    path = ::mkdtemp(name);
  }
  ~temp_folder() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void write_file(const std::string& path, size_t size, char fill) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << std::string(size, fill);
  REQUIRE(out.good());
}

// An mtime in the past, so that any later write gives the file another one.
void age(const std::string& path) {
  const timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
  REQUIRE(::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const io_error& e) {
    return e.what();
  }
  return "";
}

// Runs `f` in a child process; returns the signal that ended it (0: it exited).
int signal_of_child(const std::function<void()>& f) {
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    f();
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

}  // namespace

TEST_CASE("a mapping whose file is truncated reads zeros and is flagged, without a signal", "[mapped_file][sigbus]") {
  temp_folder tmp;
  const std::string path = tmp.file("ckpt.pt");
  write_file(path, 4 * kPage, '\xab');
  auto m = mapped_file::open(path);
  REQUIRE(m->data()[3 * kPage] == 0xab);
  CHECK_FALSE(m->faulted());
  CHECK_NOTHROW(m->check_unchanged());

  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(kPage)) == 0);
  // Past the new end: SIGBUS without the guard. The guard maps zeros over the whole mapping.
  const volatile uint8_t* bytes = m->data();
  CHECK(bytes[2 * kPage] == 0);
  CHECK(m->faulted());
  CHECK(bytes[3 * kPage + 7] == 0);
  CHECK(bytes[0] == 0);
  const std::string message = message_of([&] { m->throw_if_faulted(); });
  CHECK(message.find(path + ": changed while being read") == 0);
  CHECK(message_of([&] { mapped_file::check_all_unchanged(); }).find(path + ": changed while being read") == 0);
  CHECK(mapped_file::first_faulted() == path);
}

TEST_CASE("release_pages drops this process's pages of the range and those mapped around it, no others",
          "[mapped_file]") {
  temp_folder tmp;
  const std::string path = tmp.file("big.pt");
  constexpr size_t kMiB = 1 << 20;
  write_file(path, 16 * kMiB, '\x11');
  auto m = mapped_file::open(path);
  const volatile uint8_t* bytes = m->data();
  REQUIRE(swavg::test::resident_bytes_of_mapping(m->data()) == 0);
  CHECK(bytes[0] == 0x11);
  CHECK(bytes[12 * kMiB] == 0x11);
  REQUIRE(swavg::test::resident_bytes_of_mapping(m->data()) >= 2 * kPage);
  m->release_pages(12 * kMiB, 12 * kMiB + 1);  // the page at 0 stays
  const uint64_t left = swavg::test::resident_bytes_of_mapping(m->data());
  CHECK(left > 0);
  CHECK(left <= 4 * kMiB);  // at most the 2 MiB mapped around byte 0, twice over
  m->release_pages(0, 1);
  CHECK(swavg::test::resident_bytes_of_mapping(m->data()) == 0);
  CHECK(bytes[12 * kMiB] == 0x11);  // dropped pages read again
}

TEST_CASE("only the truncated mapping is flagged", "[mapped_file][sigbus]") {
  temp_folder tmp;
  write_file(tmp.file("a"), 2 * kPage, 'a');
  write_file(tmp.file("b"), 2 * kPage, 'b');
  auto a = mapped_file::open(tmp.file("a"));
  auto b = mapped_file::open(tmp.file("b"));
  REQUIRE(::truncate(tmp.file("b").c_str(), 0) == 0);
  const volatile uint8_t* pb = b->data();
  CHECK(pb[kPage] == 0);
  CHECK(b->faulted());
  CHECK_FALSE(a->faulted());
  CHECK(a->data()[kPage] == 'a');
  CHECK_NOTHROW(a->check_unchanged());
}

TEST_CASE("a rewrite that keeps the size, a replaced or a removed file is changed", "[mapped_file]") {
  temp_folder tmp;
  const std::string path = tmp.file("ckpt.pt");
  const std::string other = tmp.file("other.pt");
  SECTION("rewritten in place, same size") {
    write_file(path, 2 * kPage, 'x');
    age(path);
    auto m = mapped_file::open(path);
    CHECK_NOTHROW(m->check_unchanged());
    write_file(path, 2 * kPage, 'y');
    CHECK_FALSE(m->faulted());
    CHECK(message_of([&] { m->check_unchanged(); }) == path + ": changed while being read (it was modified)");
  }
  SECTION("rewritten and its mtime put back: the ctime still moved") {
    write_file(path, 2 * kPage, 'x');
    age(path);
    auto m = mapped_file::open(path);
    ::usleep(50000);  // more than a timestamp tick
    write_file(path, 2 * kPage, 'y');
    age(path);
    CHECK(message_of([&] { m->check_unchanged(); }) == path + ": changed while being read (it was modified)");
  }
  SECTION("grown") {
    write_file(path, 2 * kPage, 'x');
    auto m = mapped_file::open(path);
    std::ofstream(path, std::ios::binary | std::ios::app) << "more";
    CHECK(message_of([&] { m->check_unchanged(); })
              .find(fmt::format("{}: changed while being read ({} bytes at open, {} now)", path, 2 * kPage,
                                2 * kPage + 4)) == 0);
  }
  SECTION("replaced by rename") {
    write_file(path, 2 * kPage, 'x');
    auto m = mapped_file::open(path);
    write_file(other, 2 * kPage, 'x');
    fs::rename(other, path);
    CHECK(message_of([&] { m->check_unchanged(); }) ==
          path + ": changed while being read (it was replaced by another file)");
    CHECK(m->data()[0] == 'x');  // the mapping still holds the old file
  }
  SECTION("removed") {
    write_file(path, 2 * kPage, 'x');
    auto m = mapped_file::open(path);
    fs::remove(path);
    CHECK(message_of([&] {
            m->check_unchanged();
          }).find(path + ": changed while being read (it can no longer be opened") == 0);
  }
}

TEST_CASE("an output is not committed when an input changed", "[mapped_file][atomic_file]") {
  temp_folder tmp;
  const std::string input = tmp.file("in.pt");
  const std::string output = tmp.file("out.pt");
  write_file(input, 2 * kPage, 'x');
  age(input);
  auto m = mapped_file::open(input);
  {
    atomic_file out(output);
    out.write(m->data(), m->size());
    write_file(input, 2 * kPage, 'z');
    CHECK(message_of([&] { out.commit(); }).find(input + ": changed while being read") == 0);
  }
  CHECK_FALSE(fs::exists(output));
  CHECK(fs::directory_iterator(tmp.path) != fs::directory_iterator());
  for (const auto& e : fs::directory_iterator(tmp.path)) CHECK(e.path().filename() == "in.pt");
}

TEST_CASE("write() from a truncated mapping is the input changing, not a bad address", "[mapped_file][sigbus]") {
  temp_folder tmp;
  const std::string input = tmp.file("in.pt");
  const size_t size = 256 * kPage;  // 1 MiB: written straight from the mapping, not through the buffer
  write_file(input, size, 'x');
  auto m = mapped_file::open(input);
  REQUIRE(::truncate(input.c_str(), 0) == 0);
  atomic_file out(tmp.file("out.pt"));
  CHECK(message_of([&] { out.write(m->data(), size); }).find(input + ": changed while being read") == 0);
  CHECK(m->faulted());
}

TEST_CASE("faults outside guarded mappings still kill the process", "[mapped_file][sigbus]") {
  temp_folder tmp;
  const std::string path = tmp.file("plain");
  write_file(path, 2 * kPage, 'p');
  auto guarded = mapped_file::open(path);  // the handler is installed
  SECTION("a plain mapping of a truncated file") {
    CHECK(signal_of_child([&] {
            const int fd = ::open(path.c_str(), O_RDONLY);
            void* p = ::mmap(nullptr, 2 * kPage, PROT_READ, MAP_PRIVATE, fd, 0);
            if (::ftruncate(::open(path.c_str(), O_WRONLY), 0) != 0) ::_exit(3);
            (void)static_cast<volatile uint8_t*>(p)[kPage];
          }) == SIGBUS);
  }
  SECTION("SIGBUS sent by kill") {
    CHECK(signal_of_child([] { ::kill(::getpid(), SIGBUS); }) == SIGBUS);
  }
  SECTION("a guarded mapping in the same child survives") {
    CHECK(signal_of_child([&] {
            if (::truncate(path.c_str(), 0) != 0) ::_exit(3);
            if (static_cast<const volatile uint8_t*>(guarded->data())[kPage] != 0 || !guarded->faulted()) ::_exit(4);
          }) == 0);
  }
}
