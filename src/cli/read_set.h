/*
 * The one output rule of every subcommand that writes (average, ema and their shard workers,
 * posthoc-ema, convert, update-bn): the files a run reads are gathered once, here, as its readers
 * open them (each checkpoint argument and the files behind it: an index and its shards, a DCP
 * folder's .metadata and rank files, a DeepSpeed folder's files), with the other files it reads
 * (--resume, --rules, --model, --data, --avg-fn, --inputs-from). Then no output, report, temporary
 * or staging path may be one of them (same device and inode, so through symlinks and hard links
 * too), lie inside one that is a folder, or, for a folder output, hold one; not even with --force.
 * The one exception is the rolling average: -o may be the --resume file or folder itself (the
 * resumed files stay mapped while their successor is renamed over them); a report never may.
 */
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace swavg {

class output_folder;

// What a run writes, for the checks: the option that names it, its path ("" when not given), and
// whether it may replace an existing file (--force; a report always may).
struct output_path {
  std::string option;
  std::string path;
  bool force = false;
};

class read_set {
 public:
  // A checkpoint argument (a file, a sharded folder or index, a DCP or DeepSpeed folder): the
  // argument and every file its reader opens.
  void add_checkpoint(const std::string& path);
  // A file read as it is given (--rules, --model, --data, --avg-fn, --inputs-from); "" is none.
  void add_file(const std::string& path);
  // --resume: a checkpoint read, but one the first output may replace when it is that output.
  void add_resumed(const std::string& path);

  // Every file and argument read, the resumed one's included.
  std::vector<std::string> files() const;

  // Refuses (usage_error; io_error for a missing folder), before anything is read, outputs that
  // name the same file, and each output that is read, lies in a folder read, is not a regular file,
  // or exists without its `force`. outputs[0] (-o) may be the --resume checkpoint itself.
  void check_file_outputs(const std::vector<output_path>& outputs) const;
  // A folder output (-o DIR/ and, for a worker, DIR.partial/): neither may hold nor lie in a file
  // read, even with --force; `reports` (file outputs beside it) may not lie in it either, and are
  // checked as check_file_outputs checks them.
  void check_folder_output(const output_folder& out, const std::vector<output_path>& reports) const;

 private:
  void check_distinct(const std::vector<output_path>& outputs, bool first_is_output) const;
  std::vector<std::string> read_for(const std::string& output, bool folder_output) const;
  std::vector<std::string> files_;
  std::string resumed_;
  std::vector<std::string> resumed_files_;
};

}  // namespace swavg
