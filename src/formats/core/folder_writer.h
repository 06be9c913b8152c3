/*
 * The interface of a folder output's format, one implementation per format: the Hugging Face
 * shards and index (hf_folder_writer, sharded_output.h) and the DCP rank files and `.metadata`
 * (dcp_folder_writer, dcp_output.h). As PyTorch DCP's StorageWriter, whose implementations differ
 * only in planning and finishing, the callers (the folder protocol, output_folder.h; the workers'
 * and finalize's, worker_files.h) know no format and call it in this order:
 *   1. plan(specs, metadata): the whole folder before any byte is written, the same for every
 *      worker of a job (it goes into their plan file): the files, the tensors each holds, and the
 *      index as its name and bytes (model.safetensors.index.json, DCP's .metadata; none for a
 *      single file);
 *   2. open(folder, plan, ...): the sink of the files one worker owns (file s belongs to worker
 *      s mod N); the fold writes the bytes of the tensors it owns(), then commit();
 *   3. the index: written by the caller from the plan's bytes (finalize: from the plan file), so a
 *      format has nothing left to finish.
 * planned_file_size() says what --dry-run shows of a file without writing it.
 * Header only: the interfaces and the plan's types.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/core/output_format.h"
#include "formats/core/output_sink.h"

namespace swavg {

// The most files a folder's plan may list (model-NNNNN-of-NNNNN), checked before any loop over them.
inline constexpr size_t kMaxShards = 99'999;

// The names of the job's own files (worker_files.h): the plan, the workers' manifests, finalize's
// record beside OUT, and temporary files (".swavg-tmp-"). No format names a file so, and an input
// folder's file so named is never copied.
inline constexpr const char* kPlanName = "swavg-plan.json";
inline constexpr const char* kManifestPrefix = "swavg-worker-";
inline constexpr const char* kFinalizeRecordSuffix = ".swavg-finalize.json";
inline bool is_job_file_name(const std::string& name) {
  const std::string prefix = kManifestPrefix, suffix = ".json";
  return name == kPlanName || name.find(".swavg-") != std::string::npos ||
         (name.size() >= prefix.size() + suffix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0);
}

// A file written into an output folder: its name there, size and (when hashed) SHA-256.
struct written_file {
  std::string name;  // inside the output folder
  uint64_t size = 0;
  std::string sha256;
};

struct output_shard {
  std::string file;
  std::vector<size_t> specs;  // indices of the tensors it holds
  uint64_t bytes = 0;         // their data
  uint64_t file_size = 0;     // the file's exact size where the plan fixes it (dcp's rank files), else 0
};

// A folder's plan: its files ("shards") and its index.
struct shard_layout {
  output_format format = output_format::safetensors;
  uint64_t max_shard_size = 0;     // --max-shard-size, as the plan records it
  std::vector<tensor_spec> specs;  // every tensor of the output, in order
  std::vector<output_shard> shards;
  uint64_t total_size = 0;
  std::string index_name;   // "" when the folder has no index
  std::string index_bytes;  // the index's bytes, written last
  bool indexed() const { return !index_name.empty(); }
};

// 0-based shard s belongs to worker s mod count.
inline bool worker_owns(size_t shard, size_t index, size_t count) { return shard % count == index; }

// Which of layout.specs worker `index` of `count` writes: those in any of its shards (a DCP tensor
// spans several rank files, so several workers write parts of it). The sinks and --dry-run ask here.
inline std::vector<bool> specs_owned(const shard_layout& layout, size_t index, size_t count) {
  std::vector<bool> owned(layout.specs.size());
  for (size_t s = 0; s < layout.shards.size(); ++s)
    if (worker_owns(s, index, count))
      for (size_t i : layout.shards[s].specs) owned.at(i) = true;
  return owned;
}

// The files of one worker of a folder: each committed (atomically) when complete; files() lists
// them (SHA-256 when hashed) once committed.
class folder_sink : public output_sink {
 public:
  virtual const std::vector<written_file>& files() const = 0;
};

class folder_writer {
 public:
  virtual ~folder_writer() = default;
  // 1. The folder's plan; usage_error past kMaxShards files.
  virtual shard_layout plan(std::vector<tensor_spec> specs,
                            const std::map<std::string, std::string>& metadata) const = 0;
  // 2. The sink of the files worker `worker_index` of `worker_count` owns in `plan`, written into
  // `folder` (the staging folder or OUT.partial), each hashed when `hashed`. `plan` must outlive it.
  virtual std::unique_ptr<folder_sink> open(const std::string& folder, const shard_layout& plan,
                                            const std::map<std::string, std::string>& metadata, size_t worker_index,
                                            size_t worker_count, bool hashed) const = 0;
  // File `s` of `plan` as --dry-run shows it: exact, or a bound (torch.save).
  virtual planned_size planned_file_size(const std::string& folder, const shard_layout& plan, size_t s,
                                         const std::map<std::string, std::string>& metadata) const = 0;
};

}  // namespace swavg
