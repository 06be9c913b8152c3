/*
 * Read-ahead for the fold. The fold reads tensor by tensor across all inputs, slice by slice, and
 * drops the pages behind it; with many inputs on a cold cache every file is read in small jumps
 * between files and the kernel's own readahead (sequential faults in one mapping) never builds up.
 * The prefetcher knows the order the tensors will be folded in (a worker's share, not necessarily
 * the whole plan) and keeps a window of the bytes each input file will be read for next under
 * madvise(MADV_WILLNEED): the kernel reads them asynchronously into the page cache, without mapping
 * them into this process, so peak RSS stays flat. By default it is on only where the kernel's
 * readahead is small (default_prefetch_total below says why); SWAVG_PREFETCH_BYTES overrides that.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "fold/plan.h"

namespace swavg {

class mapped_file;

// Bytes read ahead on all input files together, split evenly between them, within these bounds
// per file; SWAVG_PREFETCH_BYTES in the environment sets the total, else default_prefetch_total.
constexpr uint64_t kPrefetchMinPerFile = uint64_t{4} << 20;
constexpr uint64_t kPrefetchMaxPerFile = uint64_t{64} << 20;
// The default total where the kernel reads ahead less than one file's smallest window by itself.
constexpr uint64_t kPrefetchDefaultTotal = uint64_t{128} << 20;
// The default read-ahead: kPrefetchDefaultTotal where the inputs' block device has a read_ahead_kb
// below a file's smallest window (kPrefetchMinPerFile, 4096 KiB), 0 (off) from there on, or where it
// is not known (no block device). Measured (README, Performance): at read_ahead_kb 128 read-ahead
// kept a cold fold near the floor where the kernel alone did not; at 8192 every window cost CPU time
// in the fold thread and made it slower.
uint64_t default_prefetch_total(std::optional<uint64_t> read_ahead_kb);
// read_ahead_kb of the block device holding `path` (a partition's disk; else the file system's
// backing device in /sys/class/bdi), nullopt where there is none.
std::optional<uint64_t> read_ahead_kb_of(const std::string& path);
using read_ahead_lookup = std::function<std::optional<uint64_t>(const std::string& path)>;
// The smallest read_ahead_kb, as `lookup` gives it, of the files the mapped inputs of `order` are
// in (each file asked once); nullopt if none is known.
std::optional<uint64_t> smallest_read_ahead_kb(const std::vector<const tensor_plan*>& order,
                                               const read_ahead_lookup& lookup);
// Read-ahead is asked for in pieces of at most this many bytes.
constexpr uint64_t kPrefetchPiece = uint64_t{4} << 20;

class prefetcher {
 public:
  // `order`: the tensors in the order they will be folded; they must outlive the prefetcher. The
  // total: SWAVG_PREFETCH_BYTES, else default_prefetch_total of the smallest read_ahead_kb of the
  // inputs' devices.
  explicit prefetcher(const std::vector<const tensor_plan*>& order);
  prefetcher(const std::vector<const tensor_plan*>& order, uint64_t total_bytes);

  // Before tensor `p` (one of `order`) is folded: everything before it is read.
  void start(const tensor_plan& p) { advance(p, 0); }
  // The first `elements` elements of `p` have been read from every input.
  void advance(const tensor_plan& p, int64_t elements);

  uint64_t window() const { return window_; }
  uint64_t bytes_requested() const { return requested_; }

 private:
  struct range {
    uint64_t offset;
    uint64_t length;
  };
  struct stream {  // one input file, its byte ranges in the order they will be read
    const mapped_file* file;
    std::vector<range> ranges;
    size_t next = 0;         // first range not fully requested
    uint64_t next_done = 0;  // bytes of ranges[next] already requested
    uint64_t requested = 0;  // bytes requested so far, in reading order
    uint64_t consumed = 0;   // bytes read so far, in reading order
    uint64_t listed = 0;     // bytes of all ranges
  };
  struct use {  // a view of a tensor: its stream, the stream's bytes before it, its own bytes
    size_t stream;
    uint64_t before;
    uint64_t length;
    uint64_t itemsize;  // 0: a strided view, gathered whole
  };

  void add_view(size_t k, const tensor_view& v);
  // A plain view; `gathered`: read whole when its tensor starts, not slice by slice.
  void add_view(size_t k, const tensor_view& v, bool gathered);
  void top_up(stream& s);

  std::vector<stream> streams_;
  std::unordered_map<const mapped_file*, size_t> stream_of_;
  std::vector<std::vector<use>> uses_;  // per tensor of `order`
  std::unordered_map<const tensor_plan*, size_t> index_;
  uint64_t window_ = 0;
  uint64_t requested_ = 0;
};

}  // namespace swavg
