/*
 * The writer of a sharded output's shards (shard_layout.h says how tensors are packed into them):
 * all of them for a plain run, a worker's own for a shard-parallel one (output shard k, 1-based,
 * belongs to worker (k - 1) mod N). output_folder.h owns the folder they are written into, the
 * plan, the index and the manifests (worker_files.h).
 */
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/output_sink.h"
#include "formats/save.h"
#include "formats/shard_layout.h"

namespace swavg {

// Streams the tensors of the shards this worker owns (all of them for a plain run) into `folder`:
// write() their bytes in the layout's order, skipping the other workers' tensors, then commit().
// Each shard is a tensor_sink of its own, committed (atomically) when its last byte arrives; with
// `hashed` (workers, for their manifests) files() have their SHA-256.
class sharded_sink final : public output_sink {
 public:
  sharded_sink(std::string folder, const shard_layout& layout, const std::map<std::string, std::string>& metadata,
               size_t worker_index, size_t worker_count, bool hashed);
  ~sharded_sink() override;
  void write(const void* data, uint64_t size) override;
  void commit() override;
  uint64_t bytes_written() const override { return bytes_written_; }
  bool owns(size_t spec) const override { return spec_owned_.at(spec); }
  const std::vector<written_file>& files() const { return files_; }

 private:
  void open_next();
  void close_full();
  std::string folder_;
  const shard_layout& layout_;
  std::map<std::string, std::string> metadata_;
  std::vector<size_t> owned_;     // shard indices
  std::vector<bool> spec_owned_;  // by tensor
  size_t next_ = 0;               // into owned_
  std::unique_ptr<tensor_sink> sink_;
  size_t open_shard_ = 0;
  uint64_t remaining_ = 0;
  std::vector<written_file> files_;
  uint64_t bytes_written_ = 0;
  bool hashed_ = false;
};

}  // namespace swavg
