#include "util/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "util/error.h"

namespace swavg {
namespace {

constexpr size_t kBufferSize = 4 << 20;
constexpr size_t kDirectWrite = 256 << 10;  // larger writes skip the buffer's copy
constexpr uint64_t kWritebackStep = 32 << 20;
constexpr const char* kTempMarker = ".swavg-tmp-";

std::string parent_dir(const std::string& path) {
  auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Temp files are named ".<target>.swavg-tmp-<pid>-<random>". Ones whose process is gone were left
// by a killed run: remove them.
void remove_stale_temps(const std::string& dir, const std::string& target_base) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const std::string prefix = "." + target_base + kTempMarker;
  while (dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    ::unlink((dir + "/" + name).c_str());
  }
  ::closedir(d);
}

void write_all(int fd, const char* p, uint64_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<uint64_t>(n, 1u << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw io_error(fmt::format("{}: write failed: {}", path, errno_text(errno)));
    }
    p += w;
    n -= static_cast<uint64_t>(w);
  }
}

}  // namespace

atomic_file::atomic_file(std::string target) : target_(std::move(target)) {
  const std::string dir = parent_dir(target_);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw io_error(fmt::format("{}: output folder '{}' does not exist", target_, dir));
  remove_stale_temps(dir, base_name(target_));
  std::random_device rd;
  temp_ = temp_path_beside(target_, std::to_string(rd() % 1000000));
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw io_error(fmt::format("{}: cannot create temp file {}: {}", target_, temp_, errno_text(errno)));
  buffer_.reserve(kBufferSize);
}

atomic_file::~atomic_file() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void atomic_file::flush() {
  if (buffer_.empty()) return;
  write_all(fd_, buffer_.data(), buffer_.size(), target_);
  buffer_.clear();
  start_writeback();
}

// Starts writing back what is in the file so far without waiting for it, so that the disk works
// while the next tensors are computed and commit()'s fsync has little left to wait for.
void atomic_file::start_writeback() {
  const uint64_t on_file = written_ - buffer_.size();
  if (on_file < writeback_from_ + kWritebackStep) return;
  ::sync_file_range(fd_, static_cast<off_t>(writeback_from_), static_cast<off_t>(on_file - writeback_from_),
                    SYNC_FILE_RANGE_WRITE);
  writeback_from_ = on_file;
}

void atomic_file::write(const void* data, uint64_t size) {
  const char* p = static_cast<const char*>(data);
  if (size >= kDirectWrite) {
    flush();
    write_all(fd_, p, size, target_);
    written_ += size;
    start_writeback();
  } else {
    if (buffer_.size() + size > kBufferSize) flush();
    buffer_.insert(buffer_.end(), p, p + size);
    written_ += size;
  }
}

void atomic_file::pwrite(const void* data, uint64_t size, uint64_t offset) {
  flush();
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t w = ::pwrite(fd_, p, size, static_cast<off_t>(offset));
    if (w < 0) {
      if (errno == EINTR) continue;
      throw io_error(fmt::format("{}: write failed: {}", target_, errno_text(errno)));
    }
    p += w;
    size -= static_cast<uint64_t>(w);
    offset += static_cast<uint64_t>(w);
  }
}

void atomic_file::commit() {
  flush();
  if (::fsync(fd_) != 0) throw io_error(fmt::format("{}: fsync failed: {}", target_, errno_text(errno)));
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw io_error(fmt::format("{}: close failed: {}", target_, errno_text(errno)));
  }
  fd_ = -1;
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    throw io_error(fmt::format("{}: cannot rename temp file into place: {}", target_, errno_text(errno)));
  committed_ = true;
  int dfd = ::open(parent_dir(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string temp_path_beside(const std::string& target, const std::string& tag) {
  return parent_dir(target) + "/." + base_name(target) + kTempMarker + std::to_string(::getpid()) + "-" + tag;
}

void check_output_path(const std::string& output, const std::vector<std::string>& inputs, bool force) {
  struct stat out {};
  if (::stat(output.c_str(), &out) != 0) return;  // does not exist (yet): fine
  for (const auto& in : inputs) {
    struct stat st {};
    if (::stat(in.c_str(), &st) == 0 && st.st_dev == out.st_dev && st.st_ino == out.st_ino)
      throw usage_error(fmt::format("{}: the output is the input '{}'; swavg never overwrites its inputs", output, in));
  }
  if (S_ISDIR(out.st_mode)) throw usage_error(output + ": the output is a directory");
  if (!force) throw usage_error(output + ": the output exists; pass --force to replace it");
}

}  // namespace swavg
