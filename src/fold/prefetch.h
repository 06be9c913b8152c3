/*
 * Read-ahead for the fold. The fold reads tensor by tensor across all inputs, slice by slice, and
 * drops the pages behind it; with many inputs on a cold cache every file is read in small jumps
 * between files and the kernel's own readahead (sequential faults in one mapping) never builds up.
 * The prefetcher knows the order the tensors will be folded in (a worker's share, not necessarily
 * the whole plan) and keeps a window of the bytes each input file will be read for next under
 * madvise(MADV_WILLNEED): the kernel reads them asynchronously into the page cache, without mapping
 * them into this process, so peak RSS stays flat. It is off unless SWAVG_PREFETCH_BYTES asks for it
 * (kPrefetchTotalBytes below says why).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "fold/plan.h"

namespace swavg {

class mapped_file;

// Bytes read ahead on all input files together, split evenly between them, within these bounds
// per file; SWAVG_PREFETCH_BYTES in the environment sets the total. Off by default: on this
// project's machine (virtio disk, read_ahead_kb 8192) the kernel's own readahead kept a cold
// average at the I/O floor, and every window measured (32 MiB to 512 MiB) cost CPU time in the
// fold thread and made it slower (README, Performance).
constexpr uint64_t kPrefetchTotalBytes = 0;
constexpr uint64_t kPrefetchMinPerFile = uint64_t{4} << 20;
constexpr uint64_t kPrefetchMaxPerFile = uint64_t{64} << 20;
// Read-ahead is asked for in pieces of at most this many bytes.
constexpr uint64_t kPrefetchPiece = uint64_t{4} << 20;

class prefetcher {
 public:
  // `order`: the tensors in the order they will be folded; they must outlive the prefetcher.
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
