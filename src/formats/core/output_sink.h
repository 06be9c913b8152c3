/*
 * The interface every writer of averaged tensors implements: a single file (tensor_sink, save.h),
 * the shards of a folder output, all of them or one worker's (sharded_sink, sharded_output.h; a DCP
 * folder's rank files: dcp_sink, dcp_output.h), and
 * posthoc-ema's outputs written in step (fold/posthoc.cpp). The tensors are declared when the sink
 * is made; the fold then streams the bytes of those the sink owns, in their declared order, and
 * commits. Header only: an interface and the declaration, no code.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace swavg {

// One declared tensor: its name in the output, dtype and shape.
struct tensor_spec {
  std::string name;
  dtype type;
  std::vector<int64_t> shape;
  // torch.save only: a view of this earlier spec's storage (a tied weight), no bytes of its own.
  std::optional<size_t> alias_of;
};

// A file's size as a plan (--dry-run) tells it: exact, or a bound (torch.save's records).
struct planned_size {
  uint64_t bytes = 0;
  bool exact = true;
};

class output_sink {
 public:
  virtual ~output_sink() = default;

  // The next `size` bytes of the owned tensors, one after the other in declared order (contiguous,
  // row-major; none for an alias of an earlier tensor). error(internal) past the last one.
  virtual void write(const void* data, uint64_t size) = 0;
  // After the last byte: the outputs appear (atomically, each). error(internal) before it.
  virtual void commit() = 0;
  // Bytes written to the outputs' files so far.
  virtual uint64_t bytes_written() const = 0;
  // Whether declared tensor `spec` (its index) is this sink's to write: every one, but for a worker
  // of several, which writes only the tensors of its own shards.
  virtual bool owns(size_t spec) const = 0;
};

}  // namespace swavg
