#include "util/regular_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <utility>

#include "util/error.h"

namespace swavg {

std::string file_type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

namespace {

[[noreturn]] void throw_open_error(const std::string& path, int err) {
  struct stat lst {};
  if (err == ENOENT && ::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode))
    throw io_error(path + ": dangling symbolic link");
  if (err == ELOOP) throw io_error(path + ": too many levels of symbolic links");
  // `swavg average nothere/ckpt_*.pt`: the shell passes a pattern that matched nothing as it is.
  if (err == ENOENT && path.find_first_of("*?[") != std::string::npos)
    throw io_error(
        fmt::format("{}: no such file: this looks like a file pattern, and the shell found no file "
                    "matching it (check the folder and the pattern)",
                    path));
  throw io_error(fmt::format("{}: cannot open: {}", path, errno_text(err)));
}

void require_regular(const std::string& path, const struct stat& st) {
  if (!S_ISREG(st.st_mode))
    throw input_error(fmt::format("{}: expected a regular file but it is {}", path, file_type_name(st.st_mode)));
}

}  // namespace

void (*regular_file::between_stat_and_open)(const std::string& path) = nullptr;

regular_file regular_file::open(const std::string& path, open_mode mode) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw_open_error(path, errno);
  if (mode == open_mode::streams_too && !S_ISDIR(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);  // waits for a FIFO's writer
    if (fd < 0) throw_open_error(path, errno);
    regular_file f(fd, st, path);
    if (::fstat(fd, &f.st_) != 0) throw io_error(fmt::format("{}: cannot stat: {}", path, errno_text(errno)));
    return f;
  }
  // A device is refused before it is opened (opening some has effects); the descriptor's own fstat
  // then catches a path swapped in between.
  require_regular(path, st);
  if (between_stat_and_open != nullptr) between_stat_and_open(path);
  // O_NONBLOCK: a FIFO swapped in after the stat opens at once instead of waiting for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) throw_open_error(path, errno);
  regular_file f(fd, st, path);
  if (::fstat(fd, &f.st_) != 0) throw io_error(fmt::format("{}: cannot stat: {}", path, errno_text(errno)));
  require_regular(path, f.st_);
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return f;
}

regular_file::regular_file(regular_file&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), st_(other.st_), path_(std::move(other.path_)) {}

regular_file::~regular_file() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace swavg
