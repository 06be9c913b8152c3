/*
 * Atomic output: bytes go to a temp file in the target's folder; commit() fsyncs it, checks that no
 * mapped input changed meanwhile (mapped_file::check_all_unchanged), renames it over the target and
 * fsyncs the folder, so the target is either the old file or the complete new one, never a partial
 * one nor one made from a changed input. A temp file not committed is removed by the destructor.
 *
 * Temp files left by a killed run carry a recognisable name and are removed by the next run writing
 * the same target, but only when no process holds them: each temp file is flock()ed for its whole
 * life (until after its rename), and the cleaner removes a temp file only if it can take that lock.
 * A lock, unlike a pid in the name, also tells live from dead across pid namespaces and containers
 * sharing the folder, and after a pid was reused.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace swavg {

// The bytes an atomic_file gathers before each write(): what an open output holds in memory.
inline constexpr size_t kAtomicFileBufferBytes = size_t{4} << 20;

class sha256;

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

  // Hashes the bytes as they are written (call before the first write); after commit(), digest()
  // is the file's SHA-256. A file patched with pwrite() is read back once at commit instead.
  void hash_contents();
  const std::string& digest() const { return digest_; }

 private:
  void flush();
  void start_writeback();
  void create_temp();
  std::string target_;
  std::string temp_;
  int fd_ = -1;
  uint64_t written_ = 0;
  uint64_t writeback_from_ = 0;  // bytes before this offset are being written back
  std::vector<char> buffer_;
  bool committed_ = false;
  std::unique_ptr<sha256> hash_;
  bool patched_ = false;
  std::string digest_;
};

// A name for a temporary file beside `target` that a later run writing `target` removes unless it
// is locked (atomic_file's temp files are; hold one made otherwise with held_temp):
// ".<target>.swavg-tmp-<pid>-<tag>".
std::string temp_path_beside(const std::string& target, const std::string& tag);

// A finished file named by temp_path_beside (an intermediate output), locked from hold() on so that
// no other run removes it as stale, and removed when this is destroyed.
class held_temp {
 public:
  explicit held_temp(std::string path) : path_(std::move(path)) {}
  ~held_temp();
  held_temp(const held_temp&) = delete;
  held_temp& operator=(const held_temp&) = delete;
  // Takes the lock (io_error when the file is gone or held by another process).
  void hold();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

// Checks an output path before any input is read. io_error: its folder does not exist. usage_error:
// it is one of the inputs (same device and inode, so also through symlinks and hard links); it is in
// /dev itself or under /proc or /sys (devices and streams such as /dev/null, /dev/stdout and
// /dev/fd/1: swavg writes files, and would replace the link; /dev/shm is a folder like others); it
// exists and is not a regular file (a directory, device, FIFO or socket), even with `force`; it
// exists and `force` is not given.
void check_output_path(const std::string& output, const std::vector<std::string>& inputs, bool force);

// True when `a` and `b` name the same file: the same device and inode when both exist, else the same
// path once their folders are resolved (symlinks, "..").
bool same_file(const std::string& a, const std::string& b);

// Refuses (usage_error) two of `outputs` (option, path; empty paths skipped) that name the same file.
void check_distinct_paths(const std::vector<std::pair<std::string, std::string>>& outputs);

}  // namespace swavg
