/*
 * Atomic folders: a sharded output is staged in a folder beside its target, each file written with
 * atomic_file (so fsynced), then the folder is fsynced and renamed to the target, which therefore
 * either does not exist, is the old folder, or is the complete new one. An existing non-empty
 * target is replaced only when asked (--force): the two are exchanged (renameat2 RENAME_EXCHANGE,
 * or the old one renamed aside where the filesystem lacks it) and the old one removed afterwards.
 *
 * A staging folder is flock()ed for its whole life, as atomic_file's temps are; one whose lock can be
 * taken was left by a killed run and is removed by the next run staging the same target.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/paths.h"  // without_trailing_slash, which names the folders staged here

namespace swavg {

class staged_dir {
 public:
  // Removes stale staging folders of `target`, then creates and locks a new one.
  explicit staged_dir(const std::string& target);
  ~staged_dir();
  staged_dir(const staged_dir&) = delete;
  staged_dir& operator=(const staged_dir&) = delete;

  const std::string& path() const { return path_; }
  // Renames the staged folder to the target (see publish_dir).
  void publish(bool replace);

 private:
  std::string target_;
  std::string path_;
  int fd_ = -1;
  bool published_ = false;
};

// usage_error "<shown>: the output folder exists and is not empty; pass --force to replace it<hint>"
// when `path` is a folder holding anything and `force` is off (publish_dir replaces it with `replace`).
void refuse_non_empty_folder(const std::string& path, const std::string& shown, bool force,
                             const std::string& hint = "");

// Fsyncs `from` and renames it to `target`: a missing target or an empty folder is replaced; a
// non-empty folder only with `replace` (usage_error otherwise); anything else is a usage_error.
void publish_dir(const std::string& from, const std::string& target, bool replace);

// Creates `path` as a folder unless it exists as one (race-safe: another process may create it
// first). io_error when it cannot, or when it exists and is not a folder.
void ensure_dir(const std::string& path);

// Removes a folder and everything in it (symlinks are removed, not followed). Errors are logged.
void remove_tree(const std::string& path);

// Creates `path` holding `contents` unless it exists, atomically (written beside it, fsynced, then
// linked into place: readers never see part of it). False when it existed already.
bool create_file_once(const std::string& path, const std::string& contents);

// True when a temp file (atomic_file's) can be locked, i.e. no live process is writing it.
bool temp_is_stale(const std::string& path);

// Names of the entries of a folder, sorted, without "." and "..".
std::vector<std::string> list_dir(const std::string& path);

}  // namespace swavg
