/*
 * Atomic output: bytes go to a temp file in the target's folder; commit() fsyncs it, renames it over
 * the target and fsyncs the folder, so the target is either the old file or the complete new one,
 * never a partial one. A temp file not committed is removed by the destructor; temp files left by a
 * killed run carry a recognisable name and are cleaned up by the next run writing the same target.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace swavg {

class atomic_file {
 public:
  explicit atomic_file(std::string target);
  ~atomic_file();
  atomic_file(const atomic_file&) = delete;
  atomic_file& operator=(const atomic_file&) = delete;

  void write(const void* data, uint64_t size);
  // Overwrites bytes already written (buffered bytes are flushed first).
  void pwrite(const void* data, uint64_t size, uint64_t offset);
  uint64_t tell() const { return written_; }
  void commit();

  const std::string& target() const { return target_; }
  const std::string& temp_path() const { return temp_; }

 private:
  void flush();
  void start_writeback();
  std::string target_;
  std::string temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  uint64_t writeback_from_ = 0;  // bytes before this offset are being written back
  std::vector<char> buffer_;
  bool committed_ = false;
};

// A name for a temporary file beside `target` that a later run writing `target` removes if the
// process that made it is gone: ".<target>.swavg-tmp-<pid>-<tag>".
std::string temp_path_beside(const std::string& target, const std::string& tag);

// Refuses an output that is one of the inputs (same device and inode, so also through symlinks and
// hard links: usage_error) and an existing output without `force` (usage_error). Called before any
// input is read.
void check_output_path(const std::string& output, const std::vector<std::string>& inputs, bool force);

}  // namespace swavg
