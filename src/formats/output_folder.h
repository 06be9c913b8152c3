/*
 * One owner for a folder output (-o DIR/, a Hugging Face folder), in the order it is written:
 *   1. refuse a path that is not a folder, a folder holding an input (even with --force), and a
 *      non-empty one without --force, before anything is read;
 *   2. stage OUT/ beside itself (a plain run) or, for a worker of several, write into OUT.partial/;
 *   3. once the tensors are known: plan their shards (shard_layout.h), write the plan (a worker's,
 *      worker_files.h; a plain run only hashes it) and open the sink of this worker's shards;
 *   4. once the sink is committed: copy the input folder's other files (worker 0), then write the
 *      index and publish OUT/ (a plain run) or write this worker's manifest for `swavg finalize`.
 * A plain run that fails leaves no trace (the staging folder is removed); a worker's files stay in
 * OUT.partial/ until finalize publishes them all.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/output_sink.h"
#include "formats/shard_layout.h"
#include "formats/worker_files.h"

namespace swavg {

struct checkpoint_location;

class dcp_sink;
class sharded_sink;
class staged_dir;
struct dcp_chunk_source;
struct dcp_plan;

// Files of an input folder: what is copied to the output (not weights) and what is skipped (a file
// named like one of the job's, is_job_file_name, with a warning).
struct folder_files {
  std::vector<std::string> copied;
  std::vector<std::string> skipped;  // weights, indexes, folders, special files
};
folder_files classify_folder(const std::string& folder);
bool is_weight_file_name(const std::string& name);

// Copies `from` to `to` atomically, hashing it (symlinks followed).
written_file copy_file_hashed(const std::string& from, const std::string& to, const std::string& name);

// usage_error "<shown>: the output folder exists and is not empty; pass --force to replace it<hint>"
// when `path` is a folder holding anything and `force` is off.
void refuse_non_empty_folder(const std::string& path, const std::string& shown, bool force,
                             const std::string& hint = "");

class output_folder {
 public:
  // `out`: the folder (trailing slashes dropped). Worker `worker_index` of `worker_count` > 1 writes
  // its shards into OUT.partial/; a plain run (count 1) writes them all and publishes OUT/.
  output_folder(const std::string& out, uint64_t max_shard_size, size_t worker_index, size_t worker_count, bool force);
  ~output_folder();
  output_folder(const output_folder&) = delete;
  output_folder& operator=(const output_folder&) = delete;

  const std::string& path() const { return out_; }         // OUT, without its trailing slash
  const std::string& partial() const { return partial_; }  // OUT.partial
  bool plain() const { return worker_count_ == 1; }
  // The folders written as a whole: OUT and, for a worker of several, OUT.partial.
  std::vector<std::string> folders() const;

  // 1. Refusals, nothing written. io_error when OUT's parent is not a folder; usage_error when OUT
  // exists and is not a folder ("OUT/: exists and is not a folder<hint>"), when one of folders()
  // is or holds one of the files `inputs` read (through symlinks too), or when OUT is not empty
  // and --force is off.
  void refuse_missing_parent() const;
  void refuse_not_folder(const std::string& hint = "") const;
  void refuse_inputs_inside(const std::vector<std::string>& inputs) const;
  void refuse_non_empty() const;

  // 1b. A worker of several: takes its (shared) lock on OUT.partial/ now, before its inputs are
  // read, so that a finalize during a worker's rerun waits for it (exit 6). No-op for a plain run.
  void hold_partial();
  // 2. Stages OUT/ (a plain run; a worker writes into OUT.partial/, created with the plan).
  // `copied`: names of files in the folder `source` that worker 0 copies beside the shards;
  // `names`: the weights' file names (the input folder's library); `options`: the job's, written
  // into the plan (worker_files.h). A worker of several holds its lock from here at the latest.
  void stage(std::string source, std::vector<std::string> copied, weights_naming names = {}, job_options options = {});
  // 2b. --format dcp: chunk like `first_input` when it is a DCP folder (dcp_output.h), its state
  // dict taken at `key`. Call before open().
  void chunk_like(const std::string& first_input, const std::string& key);
  // 2c. With an input index (`source`, output_source_of's), its metadata.total_parameters goes into
  // the output's index when the output holds exactly the index's tensors (transformers 5 writes it;
  // swavg cannot count parameters apart from buffers itself). Call before plan_shards() and open().
  void carry_index_metadata(const checkpoint_location& source);
  // The shards of `specs` in `format` (dcp: the rank files, chunked as chunk_like() says), named as
  // `names` (stage's), as open() plans them (usage_error past kMaxShards), for plans (--dry-run):
  // nothing written.
  shard_layout plan_shards(output_format format, std::vector<tensor_spec> specs, const weights_naming& names) const;
  // 3. Plans the shards of `specs` (in `format`, with `metadata` in each; usage_error past
  // kMaxShards; dcp: the rank files, dcp_output.h), writes the plan and opens this worker's
  // shards: write() every tensor the sink owns(), in order, then commit().
  output_sink& open(output_format format, std::vector<tensor_spec> specs,
                    const std::map<std::string, std::string>& metadata);
  // --dry-run of a worker of several: what open() would refuse, nothing written: a plan of another
  // job in OUT.partial/ (mismatch_error, exit 4).
  // `copied`, `names`, `options`: as stage() takes them.
  void check_partial_plan(output_format format, std::vector<tensor_spec> specs,
                          const std::map<std::string, std::string>& metadata, const std::vector<std::string>& copied,
                          const weights_naming& names, const job_options& options) const;
  // 4. After the sink's commit: the copies, then the index (dcp: .metadata) and OUT/ published, or
  // the manifest (finalize writes the index).
  void finish();

  const shard_layout& layout() const { return *layout_; }
  const std::string& plan_hash() const { return plan_hash_; }
  const std::vector<written_file>& files() const { return files_; }  // this worker's: shards, copies

 private:
  // A plain run keeps the plan's hash; a worker writes it into OUT.partial/ (once, or checks it).
  void record_plan(const std::string& plan);
  // The plan's text as open() records it; `dcp` and `layout` receive the plan.
  std::string plan_text(output_format format, std::vector<tensor_spec> specs,
                        const std::map<std::string, std::string>& metadata, const std::vector<std::string>& copied,
                        const weights_naming& names, const job_options& options, std::unique_ptr<dcp_plan>& dcp,
                        shard_layout& layout) const;
  const std::string& where() const;  // the folder written now: the staging folder or OUT.partial

  std::string out_;
  std::string partial_;
  uint64_t max_shard_size_;
  size_t worker_index_;
  size_t worker_count_;
  bool force_;
  std::unique_ptr<staged_dir> stage_;
  std::string source_;
  std::vector<std::string> copied_;
  weights_naming names_;
  job_options options_;
  std::unique_ptr<partial_lock> lock_;
  std::optional<shard_layout> layout_;
  std::string plan_hash_;
  std::unique_ptr<sharded_sink> sink_;
  std::unique_ptr<dcp_chunk_source> chunks_like_;
  std::optional<uint64_t> total_parameters_;  // the source index's, with the tensor names it counts
  std::vector<std::string> total_parameters_names_;
  std::unique_ptr<dcp_plan> dcp_;
  std::unique_ptr<dcp_sink> dcp_sink_;
  std::vector<written_file> files_;
};

}  // namespace swavg
