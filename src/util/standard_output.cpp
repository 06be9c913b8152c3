#include "util/standard_output.h"

#include <fmt/format.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <iostream>
#include <streambuf>

#include "util/error.h"

namespace swavg {
namespace {

// The errno of stdout's first failed write, 0 while none failed.
int first_error = 0;

void note_error() {
  if (first_error == 0) first_error = errno != 0 ? errno : EIO;
}

// std::cout's buffer: stdio's stdout, as the default one (so that cout and printf stay in order),
// but a failed write keeps its errno, which a std::endl inside a library (CLI11's --version) would
// otherwise lose before finish_stdout() asks.
class recording_buffer : public std::streambuf {
 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    if (std::fputc(c, stdout) == EOF) {
      note_error();
      return traits_type::eof();
    }
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const size_t written = std::fwrite(s, 1, static_cast<size_t>(n), stdout);
    if (written < static_cast<size_t>(n)) note_error();
    return static_cast<std::streamsize>(written);
  }
  int sync() override {
    if (std::fflush(stdout) == 0) return 0;
    note_error();
    return -1;
  }
};

// True when stdout is a pipe or socket whose reader has gone: the failed write was EPIPE, even when
// errno no longer says so (a write that failed while stdio's buffer spilled, earlier).
bool reader_gone(int err) {
  if (err == EPIPE) return true;
  struct stat st {};
  if (::fstat(1, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) return false;
  pollfd p{1, POLLOUT, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR) != 0;
}

// 0 when stdout took everything; else the first failure's errno (EIO when it is not known).
int flush_error() {
  errno = 0;
  std::cout.flush();
  if (std::fflush(stdout) != 0) note_error();
  if (first_error == 0 && (!std::cout.good() || std::ferror(stdout))) note_error();
  return first_error;
}

}  // namespace

void buffer_stdout() {
  if (!::isatty(1)) std::setvbuf(stdout, nullptr, _IOFBF, size_t{1} << 20);
  static recording_buffer buffer;
  std::cout.rdbuf(&buffer);
}

void write_stdout(std::string_view text, const std::string& what) {
  std::cout.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (const int err = flush_error()) {
    if (reader_gone(err)) throw stdout_closed();
    throw io_error(fmt::format("stdout: cannot write {}: {}", what, errno_text(err)));
  }
}

int finish_stdout() {
  const int err = flush_error();
  if (err == 0 || reader_gone(err)) return 0;
  spdlog::error("stdout: write failed: {}", errno_text(err));
  return static_cast<int>(exit_code::io);
}

}  // namespace swavg
