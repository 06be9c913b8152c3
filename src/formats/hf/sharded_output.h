/*
 * A Hugging Face folder as an output format (folder_writer.h): its plan packs the tensors into
 * shards and makes the index (shard_layout.h), its sink writes the shards, all of them for a plain
 * run, a worker's own for a shard-parallel one (output shard k, 1-based, belongs to worker
 * (k - 1) mod N). output_folder.h owns the folder they are written into and the manifests
 * (worker_files.h).
 */
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <optional>

#include "formats/core/folder_writer.h"
#include "formats/file/save.h"
#include "formats/hf/shard_layout.h"

namespace swavg {

// Streams the tensors of the shards this worker owns (all of them for a plain run) into `folder`:
// write() their bytes in the layout's order, skipping the other workers' tensors, then commit().
// Each shard is a tensor_sink of its own, committed (atomically) when its last byte arrives; with
// `hashed` (workers, for their manifests) files() have their SHA-256.
class sharded_sink final : public folder_sink {
 public:
  sharded_sink(std::string folder, const shard_layout& layout, const std::map<std::string, std::string>& metadata,
               size_t worker_index, size_t worker_count, bool hashed);
  ~sharded_sink() override;
  void write(const void* data, uint64_t size) override;
  void commit() override;
  uint64_t bytes_written() const override { return bytes_written_; }
  bool owns(size_t spec) const override { return spec_owned_.at(spec); }
  const std::vector<written_file>& files() const override { return files_; }

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

// The shards of `format` (torch or safetensors) named as `names`, at most `max_shard_size` bytes
// each (one tensor larger gets a shard of its own). With an input index (`source_index`), its
// metadata.total_parameters goes into the output's index when the output holds exactly the index's
// tensors (transformers 5 writes it; swavg cannot count parameters apart from buffers itself).
// `out`: the folder, for messages.
struct hf_writer_options {
  std::string out;
  output_format format = output_format::safetensors;
  uint64_t max_shard_size = kDefaultMaxShardSize;
  weights_naming names;
  std::string source_index;  // "" for none
};

class hf_folder_writer final : public folder_writer {
 public:
  explicit hf_folder_writer(hf_writer_options options);
  shard_layout plan(std::vector<tensor_spec> specs, const std::map<std::string, std::string>& metadata) const override;
  std::unique_ptr<folder_sink> open(const std::string& folder, const shard_layout& plan,
                                    const std::map<std::string, std::string>& metadata, size_t worker_index,
                                    size_t worker_count, bool hashed) const override;
  planned_size planned_file_size(const std::string& folder, const shard_layout& plan, size_t s,
                                 const std::map<std::string, std::string>& metadata) const override;

 private:
  hf_writer_options options_;
  std::optional<uint64_t> total_parameters_;  // the source index's,
  std::vector<std::string> counted_;          // with the tensors it counts, sorted
};

}  // namespace swavg
