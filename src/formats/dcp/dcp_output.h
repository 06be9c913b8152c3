/*
 * A PyTorch Distributed Checkpoint (DCP) folder as an output (-o DIR/ --format dcp), written as
 * torch.distributed.checkpoint's FileSystemWriter writes one: every chunk of every tensor a
 * torch.save archive of that chunk (a tensor at the root, as torch.save(chunk) writes it) at a
 * recorded offset and length inside a `__<rank>_<n>.distcp` file, and `.metadata` the pickled
 * `Metadata` (TensorStorageMetadata, ChunkStorageMetadata, TensorProperties, MetadataIndex,
 * _StorageInfo, StorageMeta, version "1.0.0") that says where each chunk lies.
 *
 * Chunked like the first input: when it is a DCP folder, each tensor it holds is cut into the same
 * chunks (offsets, sizes) written into the same rank files, so each rank of a resumed run reads
 * only its own file; any other tensor (and every tensor of a non-DCP first input) is one chunk in
 * `__0_0.distcp`. Names are the first input's FQNs (the --key taken is put back in front), and
 * planner_data keeps the first input's path keys as they were (list indices stay ints). A rank file
 * whose name the output reserves (`.metadata`: torch reads chunks from it, a one-process folder may
 * keep them there) takes the first free `__<k>_0.distcp`.
 *
 * The archives' sizes follow from the chunks alone, so the whole layout, `.metadata` included, is
 * planned before any byte is written: shard-parallel workers agree on it through their plan, each
 * writes the rank files it owns (file k belongs to worker k mod N, as shards do), and finalize
 * writes `.metadata` from the plan. Bytes arrive row-major, tensor by tensor (output_sink.h); each
 * row-major run goes straight to its chunk's archive (a Shard(1) chunk takes one run per row), so
 * nothing is buffered, except for a tensor with two chunks in one file, which is held whole while
 * its archives are written one after the other.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/core/folder_writer.h"
#include "formats/dcp/dcp_metadata.h"

namespace swavg {

inline constexpr const char* kDcpMetadataName = ".metadata";
inline constexpr const char* kDcpSingleFile = "__0_0.distcp";

// The chunks of the first input: its `.metadata` and the --key its state dict was taken at.
struct dcp_chunk_source {
  dcp_metadata metadata;
  std::string key;   // "" when every entry was taken
  std::string path;  // the .metadata, for messages
};

struct dcp_out_chunk {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  size_t file = 0;      // into dcp_plan::files
  uint64_t nbytes = 0;  // tensor data bytes
  uint64_t offset = 0;  // the archive's offset and length in its file
  uint64_t length = 0;
  size_t pass = 0;  // earlier chunks of the same tensor in the same file
};

struct dcp_out_tensor {
  std::string fqn;
  std::vector<dcp_path_part> path;  // planner_data: the nesting of the FQN, ints kept as ints
  dtype type = dtype::float32;
  std::vector<int64_t> shape;
  std::vector<dcp_out_chunk> chunks;
  size_t passes = 1;  // the most chunks this tensor has in one file
};

struct dcp_plan {
  std::vector<std::string> files;       // the .distcp files, in the order first used
  std::vector<dcp_out_tensor> tensors;  // one per spec, in the specs' order
  shard_layout layout;                  // the files as shards, `.metadata` as the index
};

// True for a file name a DCP output folder keeps for itself: `.metadata`, swavg's job and temp
// files (their names hold ".swavg-" or start "swavg-"). A rank file of the first input so named
// takes another name in the output.
bool is_reserved_dcp_name(const std::string& name);

// Plans `specs` (row-major, no aliases) chunked like `like` (nullptr: one chunk each).
// `checkpoint_id` goes into StorageMeta as a path. mismatch_error naming the tensor and `like`'s
// file when a tensor's shape is not the one its chunks cover there; usage_error past kMaxShards
// rank files (folder_writer.h), the most a plan may list.
// `swavg`: swavg's own metadata (the resume record), kept in `.metadata` as the Metadata object's
// `swavg_metadata` attribute (dcp_metadata.h), which torch loads and ignores.
dcp_plan plan_dcp(std::vector<tensor_spec> specs, const dcp_chunk_source* like, const std::string& checkpoint_id,
                  const std::map<std::string, std::string>& swavg = {});

// The archive DCP writes for one chunk: torch.save of a tensor of `type` and `sizes`.
std::string dcp_chunk_pickle(dtype type, const std::vector<int64_t>& sizes);
// Its size in bytes (zip_archive_size of its four records; input_error past 2^64).
uint64_t dcp_chunk_archive_size(uint64_t nbytes, uint64_t pickle_size);

// Streams the rank files this worker owns (all of them for a plain run) into `folder`: write() the
// bytes of every tensor it owns(), in order, then commit(), which commits each file (atomically).
// `.metadata` is not written here (the plan's index: output_folder.h, finalize).
class dcp_sink final : public folder_sink {
 public:
  dcp_sink(std::string folder, const dcp_plan& plan, size_t worker_index, size_t worker_count, bool hashed);
  ~dcp_sink() override;
  void write(const void* data, uint64_t size) override;
  void commit() override;
  uint64_t bytes_written() const override;
  bool owns(size_t spec) const override { return spec_owned_.at(spec); }
  const std::vector<written_file>& files() const override { return files_; }

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::vector<bool> spec_owned_;
  std::vector<written_file> files_;
};

// A DCP folder as an output format (folder_writer.h): `out` is the folder (StorageMeta's
// checkpoint_id), chunked like `first_input` when it is a DCP folder, its state dict taken at `key`.
// The plan (the chunks) is kept for open(), which takes the last one planned and holds it while
// the writer lives; open() once.
class dcp_folder_writer final : public folder_writer {
 public:
  dcp_folder_writer(std::string out, const std::string& first_input, const std::string& key);
  ~dcp_folder_writer() override;
  shard_layout plan(std::vector<tensor_spec> specs, const std::map<std::string, std::string>& metadata) const override;
  std::unique_ptr<folder_sink> open(const std::string& folder, const shard_layout& plan,
                                    const std::map<std::string, std::string>& metadata, size_t worker_index,
                                    size_t worker_count, bool hashed) const override;
  planned_size planned_file_size(const std::string& folder, const shard_layout& plan, size_t s,
                                 const std::map<std::string, std::string>& metadata) const override;

 private:
  std::string out_;
  std::unique_ptr<dcp_chunk_source> like_;     // null: not chunked like a DCP input
  mutable std::unique_ptr<dcp_plan> planned_;  // the last plan()
  mutable std::unique_ptr<dcp_plan> opened_;   // the plan of open()'s sink
};

}  // namespace swavg
