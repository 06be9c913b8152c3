#include "formats/io/run_folder.h"

#include <dirent.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <fmt/format.h>

#include "formats/io/load.h"
#include "util/error.h"
#include "util/paths.h"
#include "util/text.h"

namespace swavg {
namespace {

bool temporary_name(const std::string& name) {
  if (name.empty() || name[0] == '.' || name.back() == '~') return true;
  for (const char* tail : {".tmp", ".temp", ".part", ".partial", ".incomplete"})
    if (ends_with(name, tail)) return true;
  return name.rfind("tmp-", 0) == 0 || name.rfind("tmp_", 0) == 0;
}

bool checkpoint_extension(const std::string& name) {
  for (const char* ext : {".pt", ".pth", ".bin", ".ckpt", ".safetensors", ".tar"})
    if (ends_with(name, ext)) return true;
  return false;
}

bool has_digit(const std::string& name) {
  return std::any_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// A folder that is, or is becoming, a checkpoint: a row claims it, or its name holds a step.
bool checkpoint_folder(const std::string& path, const std::string& name) {
  if (has_digit(name)) return true;
  try {
    return claim_by_path(path) != nullptr;
  } catch (const error&) {
    return false;
  }
}

struct dir_handle {
  DIR* dir;
  ~dir_handle() {
    if (dir) ::closedir(dir);
  }
};

// Every name in `folder` but . and .., then `take` for each; io_error when it cannot be read.
template <class F>
void each_name(const std::string& folder, F take) {
  dir_handle d{::opendir(folder.c_str())};
  if (!d.dir) throw io_error(fmt::format("{}: cannot read the folder: {}", folder, errno_text(errno)));
  while (const dirent* e = ::readdir(d.dir)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") take(name);
  }
}

struct signature_walk {
  size_t max_files = kMaxRunEntries;
  size_t count = 0;
  std::string text;
  timespec newest{0, 0};
};

void add_signature(const std::string& path, const std::string& shown, int depth, signature_walk& w) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;
  if (++w.count > w.max_files) throw input_error(fmt::format("{}: more than {} files", path, w.max_files));
  w.text += fmt::format("{}:{}:{}:{}.{};", shown, st.st_ino, st.st_size, st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  if (st.st_mtim.tv_sec > w.newest.tv_sec ||
      (st.st_mtim.tv_sec == w.newest.tv_sec && st.st_mtim.tv_nsec > w.newest.tv_nsec))
    w.newest = st.st_mtim;
  if (!S_ISDIR(st.st_mode) || depth == 0) return;
  std::vector<std::string> names;
  try {
    each_name(path, [&](const std::string& n) { names.push_back(n); });
  } catch (const io_error&) {
    return;  // gone meanwhile: the signature differs from the last one, which is all that matters
  }
  std::sort(names.begin(), names.end());
  for (const auto& n : names) add_signature(path_in_folder(path, n), shown + "/" + n, depth - 1, w);
}

}  // namespace

std::vector<run_entry> list_run_folder(const std::string& folder, const std::string& match, size_t max_entries) {
  std::vector<run_entry> entries;
  each_name(folder, [&](const std::string& name) {
    if (temporary_name(name)) return;
    if (!match.empty() && ::fnmatch(match.c_str(), name.c_str(), 0) != 0) return;
    run_entry e{name, path_in_folder(without_trailing_slash(folder), name), false};
    e.folder = is_folder(e.path);
    if (e.folder ? checkpoint_folder(e.path, name) : is_regular_file(e.path) && checkpoint_extension(name))
      entries.push_back(std::move(e));
    if (entries.size() > max_entries)
      throw input_error(fmt::format("{}: more than {} checkpoints", folder, max_entries));
  });
  std::sort(entries.begin(), entries.end(), [](const run_entry& a, const run_entry& b) { return a.name < b.name; });
  return entries;
}

entry_snapshot snapshot_entry(const std::string& path, size_t max_files) {
  signature_walk w;
  w.max_files = max_files;
  add_signature(path, ".", 3, w);
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const double age = static_cast<double>(now.tv_sec - w.newest.tv_sec) + (now.tv_nsec - w.newest.tv_nsec) / 1e9;
  return {std::move(w.text), age > 0 ? age : 0.0};
}

entry_readiness check_whole(const std::string& path, const load_options& options) {
  try {
    const input_row& row = claim_input(probe_input(path));
    const std::string wait = waits_for(row, path);
    if (!wait.empty()) return {false, "waiting for " + wait};
    load_state_dict(path, options);
    return {true, ""};
  } catch (const error& e) {
    return {false, e.what()};
  }
}

}  // namespace swavg
