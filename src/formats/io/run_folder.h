/*
 * A training run's folder as `swavg watch` sees it while a trainer writes it: the entries that may
 * be checkpoints, what changes while each is written (its signature), and whether it is whole.
 *
 * Entries: every file and folder directly inside the run's folder but hidden ones (".name") and
 * temporary names (*.tmp, *.temp, *.part, *.partial, *.incomplete, *~, tmp-*, tmp_*: a trainer that
 * writes then renames is seen only after the rename); files only with a checkpoint's extension
 * (.pt, .pth, .bin, .ckpt, .safetensors, .tar), folders that a row of the input table claims or whose
 * name holds a step (checkpoint-500/ before its first file). Names matching `match` (a glob) only.
 *
 * Whole: claimed by a row of the input table, nothing its row waits for (input_row::waits_for: a
 * Trainer's trainer_state.json), and read through by that row's reader, which checks every record
 * it will use (a ZIP's end records and central directory, a safetensors header against the file's
 * size, an index's shards, a DCP .metadata's rank files). Settling (the same signature for a
 * while) is a matter of time: the watcher's (fold/watch_queue.h).
 */
#pragma once

#include <string>
#include <vector>

#include "formats/io/input_kinds.h"

namespace swavg {

struct run_entry {
  std::string name;
  std::string path;  // the run's folder as given, then the name
  bool folder = false;
};

// The most entries a run's folder, or one checkpoint folder's signature, is listed with.
inline constexpr size_t kMaxRunEntries = 1 << 20;

// The entries of `folder`, in name order. Throws io_error when the folder cannot be read, and
// input_error for more than `max_entries` of them.
std::vector<run_entry> list_run_folder(const std::string& folder, const std::string& match,
                                       size_t max_entries = kMaxRunEntries);

// What changes while `path` is written: a file's size, inode and modification time; a folder's,
// for every file under it (three levels deep). `signature` is "" when it is gone; `age` is the
// seconds since its newest modification time (0 for one in the future).
struct entry_snapshot {
  std::string signature;
  double age = 0;
};
// Throws input_error for more than `max_files` files and folders under it, itself included.
entry_snapshot snapshot_entry(const std::string& path, size_t max_files = kMaxRunEntries);

struct entry_readiness {
  bool whole = false;
  std::string waiting;  // what it waits for, or why it cannot be read yet, when not whole
};
entry_readiness check_whole(const std::string& path, const load_options& options);

}  // namespace swavg
