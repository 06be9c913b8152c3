/*
 * Sharded outputs: a Hugging Face folder of shards and an index, as transformers' save_pretrained
 * writes it, and the files shard-parallel workers leave beside their shards for `swavg finalize`.
 *
 * Packing (pack_shards): greedy in the tensors' order; a tensor joins the current shard unless that
 * would pass the limit and the shard is not empty, so a tensor larger than the limit gets a shard of
 * its own. Sizes are tensor data bytes, as transformers counts them. One shard is written as the
 * single file (model.safetensors, pytorch_model.bin) with no index.
 *
 * Shard-parallel runs: output shard k (1-based) belongs to worker (k - 1) mod N. Every worker writes
 * the same plan (swavg-plan.json: the layout, the metadata, the files copied), made from the inputs'
 * headers and the options only, so the plan's SHA-256 names the job; then its shards and, last, its
 * manifest (swavg-worker-<I>-of-<N>.json: plan hash, index, count, files with size and SHA-256).
 * finalize checks them all against the plan before publishing.
 */
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/hf_index.h"
#include "formats/save.h"

namespace swavg {

inline constexpr uint64_t kDefaultMaxShardSize = 5'000'000'000;  // "5GB", transformers' default
inline constexpr const char* kPlanName = "swavg-plan.json";
inline constexpr const char* kManifestPrefix = "swavg-worker-";

// --max-shard-size: "5GB", "500MB", "2MB", "1.5GB", "123" (bytes); KB/MB/GB/TB are powers of 10,
// KiB/MiB/GiB/TiB powers of 2, case-insensitive. usage_error naming `option` for 0, a negative or
// malformed size, or one past 2^63.
uint64_t parse_shard_size(const std::string& text, const std::string& option = "--max-shard-size");

// Shards as lists of indices into `sizes`, packed as said above.
std::vector<std::vector<size_t>> pack_shards(const std::vector<uint64_t>& sizes, uint64_t limit);

struct output_shard {
  std::string file;
  std::vector<size_t> specs;  // indices of the tensors it holds
  uint64_t bytes = 0;         // their data
};

struct shard_layout {
  output_format format = output_format::safetensors;
  uint64_t max_shard_size = kDefaultMaxShardSize;
  std::vector<tensor_spec> specs;  // every tensor of the output, in order
  std::vector<output_shard> shards;
  uint64_t total_size = 0;
  weights_names names = weights_names::transformers;  // the file names: the input folder's
  bool indexed() const { return shards.size() > 1; }
};

shard_layout plan_layout(output_format format, std::vector<tensor_spec> specs, uint64_t max_shard_size,
                         weights_names names = weights_names::transformers);

// The index, byte for byte as transformers writes it: json.dumps({"metadata": {"total_size": N},
// "weight_map": {...}}, indent=2, sort_keys=True) + "\n".
std::string index_json(const shard_layout& layout);
std::string output_index_name(output_format format, weights_names names = weights_names::transformers);

// 0-based shard s belongs to worker s mod count.
inline bool worker_owns(size_t shard, size_t index, size_t count) { return shard % count == index; }
std::string manifest_name(size_t index, size_t count);  // swavg-worker-<I>-of-<N>.json

// Files of an input folder: what is copied to the output (not weights) and what is skipped.
struct folder_files {
  std::vector<std::string> copied;
  std::vector<std::string> skipped;  // weights, indexes, folders, special files
};
folder_files classify_folder(const std::string& folder);
bool is_weight_file_name(const std::string& name);

struct written_file {
  std::string name;  // inside the output folder
  uint64_t size = 0;
  std::string sha256;
};

// Copies `from` to `to` atomically, hashing it (symlinks followed).
written_file copy_file_hashed(const std::string& from, const std::string& to, const std::string& name);

struct job_plan {
  shard_layout layout;  // specs hold names only
  std::vector<std::string> copied;
  size_t workers = 1;
};

// The plan file's text (identical for every worker of the job) and its parse (input_error when it
// is not one).
std::string plan_json(const shard_layout& layout, const std::map<std::string, std::string>& metadata,
                      const std::vector<std::string>& copied, size_t workers);
job_plan parse_plan(const std::string& text, const std::string& path);

struct worker_manifest {
  std::string plan_hash;
  size_t index = 0, count = 1;
  std::vector<written_file> files;
};
std::string manifest_json(const worker_manifest& m);
worker_manifest parse_manifest(const std::string& text, const std::string& path);

// OUT without its trailing slash + kPartialSuffix: where workers write.
std::string partial_dir_of(const std::string& out);

// Writes the plan into `partial` unless a worker did already; mismatch_error (exit 4) when the plan
// there is another job's. Returns the plan's SHA-256.
std::string write_plan_once(const std::string& partial, const std::string& plan_text);

struct finalize_result {
  std::string plan_hash;
  job_plan plan;
  std::vector<written_file> files;  // every file published, the index included
  std::vector<std::string> removed_temps;
};

// Checks OUT.partial/ (the plan, every worker's manifest, every file's size and, with `verify`,
// SHA-256), writes the index, removes the plan and manifests and renames the folder to OUT.
// incomplete_error (exit 6) while a worker's manifest is missing or a worker is still writing;
// mismatch_error (4) for a manifest of another plan or count, or files no manifest lists; io_error
// (5) for a file missing, of another size or another digest. Nothing is published on error.
finalize_result finalize_partial(const std::string& out, bool verify, bool force);

// Streams the tensors of the shards this worker owns (all of them for a plain run) into `folder`:
// write() their bytes in the layout's order, skipping the other workers' tensors, then commit().
// Each shard is a tensor_sink of its own, committed (atomically) when its last byte arrives; with
// `hashed` (workers, for their manifests) files() have their SHA-256.
class sharded_sink {
 public:
  sharded_sink(std::string folder, const shard_layout& layout, const std::map<std::string, std::string>& metadata,
               size_t worker_index, size_t worker_count, bool hashed);
  ~sharded_sink();
  void write(const void* data, uint64_t size);
  void commit();
  const std::vector<written_file>& files() const { return files_; }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  void open_next();
  void close_full();
  std::string folder_;
  const shard_layout& layout_;
  std::map<std::string, std::string> metadata_;
  std::vector<size_t> owned_;  // shard indices
  size_t next_ = 0;            // into owned_
  std::unique_ptr<tensor_sink> sink_;
  size_t open_shard_ = 0;
  uint64_t remaining_ = 0;
  std::vector<written_file> files_;
  uint64_t bytes_written_ = 0;
  bool hashed_ = false;
};

}  // namespace swavg
