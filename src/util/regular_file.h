/*
 * The one way swavg opens a file it reads by name: a regular file or nothing. A FIFO, a device or a
 * socket named as a checkpoint, a rules file or an averaging function would block the read forever
 * (a FIFO with no writer, /dev/zero never ends) or feed it unbounded bytes; each is refused before
 * the first byte is read, checked on the descriptor itself (fstat), so a path swapped between a
 * check and the open cannot slip through. Streams are taken only where an option says it reads a
 * list (`--inputs-from`: a pipe from `<(ls ...)`, /dev/stdin), and then only up to a size bound.
 */
#pragma once

#include <sys/stat.h>

#include <string>
#include <utility>

namespace swavg {

enum class open_mode {
  regular_only,  // anything but a regular file is refused before it is read
  streams_too,   // a pipe, FIFO, character device or socket is read as it comes (a folder is refused)
};

// An open, read-only descriptor of a regular file and its fstat; closes on destruction.
class regular_file {
 public:
  // io_error when missing (a dangling link says so) or unopenable; input_error when not a regular
  // file ("expected a regular file but it is a FIFO").
  static regular_file open(const std::string& path, open_mode mode = open_mode::regular_only);

  regular_file(regular_file&& other) noexcept;
  regular_file& operator=(regular_file&&) = delete;
  regular_file(const regular_file&) = delete;
  ~regular_file();

  int fd() const { return fd_; }
  const struct stat& status() const { return st_; }
  const std::string& path() const { return path_; }

  // For tests: called between the path's stat and its open, where a path can be swapped.
  static void (*between_stat_and_open)(const std::string& path);

 private:
  regular_file(int fd, const struct stat& st, std::string path) : fd_(fd), st_(st), path_(std::move(path)) {}
  int fd_;
  struct stat st_;
  std::string path_;
};

// "a directory", "a FIFO", "a socket", "a device" or "not a regular file".
std::string file_type_name(mode_t mode);

}  // namespace swavg
