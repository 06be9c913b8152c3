/*
 * A read-only view of a whole file through mmap. Tensors read from checkpoints point straight into
 * the mapping and hold a shared_ptr to it, so the file stays mapped as long as any tensor uses it and
 * no byte is read before it is needed. The mapping is private and copy-on-write: an accidental write
 * through a tensor changes only this process's pages, never the file.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace swavg {

class mapped_file {
 public:
  // Opens and maps `path`. Throws io_error for a missing or unreadable file and input_error for
  // something that is not a regular file (a directory, a FIFO, a device).
  static std::shared_ptr<const mapped_file> open(const std::string& path);

  // Wraps bytes already in memory (tests, fuzzers); `path` is used in messages only.
  static std::shared_ptr<const mapped_file> from_memory(std::string bytes, const std::string& path);

  ~mapped_file();
  mapped_file(const mapped_file&) = delete;
  mapped_file& operator=(const mapped_file&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // True for a real file mapping (not from_memory): its pages can be dropped and re-read.
  bool mapped() const { return mapped_; }

  // Tells the kernel the range will be read sequentially soon (readahead).
  void will_need(uint64_t offset, uint64_t length) const;
  // Drops the pages this process has mapped for bytes [begin, end) of the file, and those the
  // kernel mapped along with them (fault-around, and large page-cache folios, mapped whole: up to
  // 2 MiB around a touched byte). They stay in the page cache and cost a minor fault when touched
  // again. A no-op for from_memory. In a file released in thousands of pieces (many tiny tensors),
  // neighbouring small ranges are gathered and dropped together (mapped_file.cpp). Not thread-safe.
  void release_pages(uint64_t begin, uint64_t end) const;
  void release_pages() const { release_pages(0, size_); }

 private:
  mapped_file() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  bool mapped_ = false;
  std::string owned_;
  void drop(uint64_t begin, uint64_t end) const;
  mutable uint64_t pending_begin_ = 0, pending_end_ = 0;  // released, not yet dropped
  mutable uint64_t releases_ = 0;
};

}  // namespace swavg
