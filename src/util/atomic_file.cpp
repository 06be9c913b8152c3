#include "util/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "util/error.h"
#include "util/mapped_file.h"
#include "util/paths.h"
#include "util/printable.h"
#include "util/progress.h"
#include "util/sha256.h"

namespace swavg {
namespace {

constexpr size_t kDirectWrite = 256 << 10;  // larger writes skip the buffer's copy
constexpr uint64_t kWritebackStep = 32 << 20;
constexpr const char* kTempMarker = ".swavg-tmp-";

bool try_lock(int fd) { return ::flock(fd, LOCK_EX | LOCK_NB) == 0; }

bool same_inode(const struct stat& a, const struct stat& b) { return a.st_dev == b.st_dev && a.st_ino == b.st_ino; }

// Temp files are named ".<target>.swavg-tmp-<pid>-<tag>" and locked by the run writing them. One
// whose lock can be taken was left by a killed run: remove it, if the name still names what was
// locked.
void remove_stale_temps(const std::string& dir, const std::string& target_base) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const std::string prefix = "." + target_base + kTempMarker;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string path = path_in_folder(dir, name);
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat held {
    }, named{};
    if (::fstat(fd, &held) == 0 && S_ISREG(held.st_mode) && try_lock(fd) && ::lstat(path.c_str(), &named) == 0 &&
        same_inode(held, named) && ::unlink(path.c_str()) == 0)
      spdlog::info("{}: removed a temp file left by a run that was killed", path);
    ::close(fd);
  }
  ::closedir(d);
}

void write_all(int fd, const char* p, uint64_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<uint64_t>(n, 1u << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      // The bytes come from a mapped input that shrank: the kernel's read of them failed.
      if (errno == EFAULT)
        if (auto input = mapped_file::fault_at(p))
          throw io_error(
              fmt::format("{}: changed while being read (it shrank, or a page of it could not be read)", *input));
      throw io_error(fmt::format("{}: write failed: {}", path, errno_text(errno)));
    }
    p += w;
    n -= static_cast<uint64_t>(w);
  }
}

}  // namespace

atomic_file::atomic_file(std::string target) : target_(std::move(target)) {
  const std::string dir = parent_dir(target_);
  if (!is_folder(dir)) throw io_error(fmt::format("{}: output folder '{}' does not exist", target_, dir));
  remove_stale_temps(dir, base_name(target_));
  create_temp();
  buffer_.reserve(kAtomicFileBufferBytes);
}

// Creates and locks the temp file. Between the create and the lock another run's cleaner may take
// the lock and remove the file: then the name no longer names our file, and we start again.
void atomic_file::create_temp() {
  std::random_device rd;
  for (int attempt = 0;; ++attempt) {
    temp_ = temp_path_beside(target_, std::to_string(rd() % 1000000));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd_ < 0 && errno == EEXIST && attempt < 100) continue;
    if (fd_ < 0) throw io_error(fmt::format("{}: cannot create temp file {}: {}", target_, temp_, errno_text(errno)));
    struct stat mine {
    }, named{};
    if (try_lock(fd_) && ::fstat(fd_, &mine) == 0 && ::lstat(temp_.c_str(), &named) == 0 && same_inode(mine, named))
      return;
    ::close(fd_);
    fd_ = -1;
    if (attempt >= 100) throw io_error(fmt::format("{}: cannot lock temp file {}", target_, temp_));
  }
}

void atomic_file::hash_contents() { hash_ = std::make_unique<sha256>(); }

atomic_file::~atomic_file() {
  if (!committed_ && fd_ >= 0) ::unlink(temp_.c_str());  // while still locked
  if (fd_ >= 0) ::close(fd_);
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
  if (hash_) hash_->update(p, size);
  if (size >= kDirectWrite) {
    flush();
    write_all(fd_, p, size, target_);
    written_ += size;
    start_writeback();
  } else {
    if (buffer_.size() + size > kAtomicFileBufferBytes) flush();
    buffer_.insert(buffer_.end(), p, p + size);
    written_ += size;
  }
}

void atomic_file::pwrite(const void* data, uint64_t size, uint64_t offset) {
  flush();
  patched_ = true;
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

// The temp file stays open, and so locked, until after the rename: a cleaner never sees it unlocked.
void atomic_file::commit() {
  flush();
  progress syncing("syncing " + printable(base_name(target_)), 0);
  if (::fsync(fd_) != 0) throw io_error(fmt::format("{}: fsync failed: {}", target_, errno_text(errno)));
  mapped_file::check_all_unchanged();
  if (hash_) digest_ = patched_ ? sha256_file(temp_) : hash_->hex_digest();
  if (::rename(temp_.c_str(), target_.c_str()) != 0)
    throw io_error(fmt::format("{}: cannot rename temp file into place: {}", target_, errno_text(errno)));
  committed_ = true;
  int dfd = ::open(parent_dir(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  ::close(fd_);  // after fsync, a close cannot lose data
  fd_ = -1;
}

std::string temp_path_beside(const std::string& target, const std::string& tag) {
  return path_in_folder(parent_dir(target),
                        "." + base_name(target) + kTempMarker + std::to_string(::getpid()) + "-" + tag);
}

held_temp::~held_temp() {
  ::unlink(path_.c_str());
  if (fd_ >= 0) ::close(fd_);
}

void held_temp::hold() {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0) throw io_error(fmt::format("{}: cannot open the intermediate output: {}", path_, errno_text(errno)));
  if (!try_lock(fd_)) throw io_error(fmt::format("{}: the intermediate output is locked by another process", path_));
}

namespace {

std::string file_type(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

void check_output_path(const std::string& output, const std::vector<std::string>& inputs, bool force) {
  const std::string dir = parent_dir(output);
  if (!is_folder(dir)) throw io_error(fmt::format("{}: output folder '{}' does not exist", output, dir));
  const std::string folder = parent_dir(folder_resolved(output));
  for (const char* special : {"/dev", "/proc", "/sys"})
    if (folder == special || (std::strcmp(special, "/dev") != 0 && is_under(folder, special)))
      throw usage_error(fmt::format("{}: swavg writes regular files, not devices or streams ({} is in {})", output,
                                    folder_resolved(output), folder));
  struct stat out {};
  const bool exists = ::stat(output.c_str(), &out) == 0;
  for (const auto& in : inputs) {
    struct stat st {};
    if (exists && ::stat(in.c_str(), &st) == 0 && same_inode(st, out))
      throw usage_error(fmt::format("{}: the output is the input '{}'; swavg never overwrites its inputs", output, in));
  }
  for (const auto& in : inputs) {
    if (is_folder(in) && is_under(folder_resolved(output), real_path(in)))
      throw usage_error(
          fmt::format("{}: inside the input folder '{}'; swavg never writes into what it reads, even "
                      "with --force",
                      output, in));
  }
  if (!exists) return;  // does not exist (yet): fine
  if (!S_ISREG(out.st_mode))
    throw usage_error(fmt::format("{}: the output is {}; swavg replaces only regular files, even with --force", output,
                                  file_type(out.st_mode)));
  if (!force) throw usage_error(output + ": the output exists; pass --force to replace it");
}

bool same_file(const std::string& a, const std::string& b) {
  struct stat sa {
  }, sb{};
  if (::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0) return same_inode(sa, sb);
  return folder_resolved(a) == folder_resolved(b);
}

void check_distinct_paths(const std::vector<std::pair<std::string, std::string>>& outputs) {
  for (size_t i = 0; i < outputs.size(); ++i)
    for (size_t j = i + 1; j < outputs.size(); ++j)
      if (!outputs[i].second.empty() && !outputs[j].second.empty() && same_file(outputs[i].second, outputs[j].second))
        throw usage_error(fmt::format("{} and {} name the same file: {}{}", outputs[i].first, outputs[j].first,
                                      outputs[i].second,
                                      outputs[i].second == outputs[j].second ? "" : " (as " + outputs[j].second + ")"));
}

}  // namespace swavg
