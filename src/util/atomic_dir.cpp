#include "util/atomic_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <random>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/paths.h"

namespace swavg {
namespace {

constexpr const char* kStageMarker = ".swavg-stage-";
constexpr const char* kOldMarker = ".swavg-old-";

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw io_error(fmt::format("{}: cannot open the folder: {}", path, errno_text(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw io_error(fmt::format("{}: fsync failed: {}", path, errno_text(err)));
}

std::string sibling(const std::string& target, const char* marker) {
  std::random_device rd;
  return path_in_folder(parent_dir(target), "." + base_name(target) + marker + std::to_string(::getpid()) + "-" +
                                                std::to_string(rd() % 1000000));
}

void remove_stale_stages(const std::string& target) {
  const std::string dir = parent_dir(target);
  const std::string prefix = "." + base_name(target) + kStageMarker;
  for (const auto& name : list_dir(dir)) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string path = path_in_folder(dir, name);
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) {
      remove_tree(path);
      spdlog::info("{}: removed a staging folder left by a run that was killed", path);
    }
    ::close(fd);
  }
}

bool is_empty_dir(const std::string& path) { return list_dir(path).empty(); }

}  // namespace

std::vector<std::string> list_dir(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (!d) throw io_error(fmt::format("{}: cannot list the folder: {}", path, errno_text(errno)));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

void remove_tree(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (S_ISDIR(st.st_mode)) {
    std::vector<std::string> names;
    try {
      names = list_dir(path);
    } catch (const error& e) {
      spdlog::warn("{}", e.what());
    }
    for (const auto& n : names) remove_tree(path_in_folder(path, n));
    if (::rmdir(path.c_str()) != 0) spdlog::warn("{}: cannot remove: {}", path, errno_text(errno));
  } else if (::unlink(path.c_str()) != 0) {
    spdlog::warn("{}: cannot remove: {}", path, errno_text(errno));
  }
}

void ensure_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0) {
    fsync_path(parent_dir(path));
    return;
  }
  const int err = errno;
  if (err == EEXIST && is_folder(path)) return;
  throw io_error(fmt::format("{}: cannot create the folder: {}", path,
                             err == EEXIST ? "it exists and is not a folder" : errno_text(err)));
}

bool create_file_once(const std::string& path, const std::string& contents) {
  const std::string temp = temp_path_beside(path, "once");
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) throw io_error(fmt::format("{}: cannot create temp file {}: {}", path, temp, errno_text(errno)));
  ::flock(fd, LOCK_EX | LOCK_NB);
  auto fail = [&](const std::string& what) {
    const int err = errno;
    ::unlink(temp.c_str());
    ::close(fd);
    return io_error(fmt::format("{}: {}: {}", path, what, errno_text(err)));
  };
  for (size_t done = 0; done < contents.size();) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw fail("write failed");
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) throw fail("fsync failed");
  const bool created = ::link(temp.c_str(), path.c_str()) == 0;
  if (!created && errno != EEXIST) throw fail("cannot link into place");
  ::unlink(temp.c_str());
  ::close(fd);
  if (created) fsync_path(parent_dir(path));
  return created;
}

bool temp_is_stale(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return true;
  const bool stale = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  ::close(fd);
  return stale;
}

staged_dir::staged_dir(const std::string& target) : target_(without_trailing_slash(target)) {
  remove_stale_stages(target_);
  for (int attempt = 0;; ++attempt) {
    path_ = sibling(target_, kStageMarker);
    if (::mkdir(path_.c_str(), 0755) != 0) {
      if (errno == EEXIST && attempt < 100) continue;
      throw io_error(fmt::format("{}: cannot create the staging folder {}: {}", target_, path_, errno_text(errno)));
    }
    fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd_ >= 0 && ::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
    // Another run's cleaner took it between the mkdir and the lock: start again.
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (attempt >= 100) throw io_error(fmt::format("{}: cannot lock the staging folder {}", target_, path_));
  }
}

staged_dir::~staged_dir() {
  if (!published_) remove_tree(path_);  // while still locked
  if (fd_ >= 0) ::close(fd_);
}

void staged_dir::publish(bool replace) {
  publish_dir(path_, target_, replace);
  published_ = true;
}

void refuse_non_empty_folder(const std::string& path, const std::string& shown, bool force, const std::string& hint) {
  struct stat st {};
  if (!force && ::stat(path.c_str(), &st) == 0 && !list_dir(path).empty())
    throw usage_error(
        fmt::format("{}: the output folder exists and is not empty; pass --force to replace it{}", shown, hint));
}

void publish_dir(const std::string& from, const std::string& target_in, bool replace) {
  const std::string target = without_trailing_slash(target_in);
  fsync_path(from);
  struct stat st {};
  if (::lstat(target.c_str(), &st) != 0 || (S_ISDIR(st.st_mode) && is_empty_dir(target))) {
    if (::rename(from.c_str(), target.c_str()) != 0)
      throw io_error(fmt::format("{}: cannot rename {} into place: {}", target, from, errno_text(errno)));
    fsync_path(parent_dir(target));
    return;
  }
  if (!S_ISDIR(st.st_mode))
    throw usage_error(fmt::format("{}: exists and is not a folder; swavg replaces only folders here", target));
  if (!replace)
    throw usage_error(fmt::format("{}: the output folder exists and is not empty; pass --force to replace it", target));
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) == 0) {
    fsync_path(parent_dir(target));
    remove_tree(from);  // now the old folder
    return;
  }
  const std::string old = sibling(target, kOldMarker);
  if (::rename(target.c_str(), old.c_str()) != 0)
    throw io_error(fmt::format("{}: cannot move the old folder aside: {}", target, errno_text(errno)));
  if (::rename(from.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::rename(old.c_str(), target.c_str());
    throw io_error(fmt::format("{}: cannot rename {} into place: {}", target, from, errno_text(err)));
  }
  fsync_path(parent_dir(target));
  remove_tree(old);
}

}  // namespace swavg
