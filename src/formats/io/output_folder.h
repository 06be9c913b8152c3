/*
 * One owner for a folder output (-o DIR/), in the order it is written; it knows no format (the
 * folder_writer given to use(), folder_writers.h, plans the files and writes them):
 *   1. refuse a path that is not a folder, a folder holding an input (even with --force), and a
 *      non-empty one without --force, before anything is read;
 *   2. stage OUT/ beside itself (a plain run) or, for a worker of several, write into OUT.partial/;
 *   3. once the tensors are known: plan the files, write the plan (a worker's, worker_files.h; a
 *      plain run only hashes it) and open the sink of this worker's files;
 *   4. once the sink is committed: copy the input folder's other files (worker 0), then write the
 *      plan's index and publish OUT/ (a plain run) or write this worker's manifest for `swavg finalize`.
 * A step out of order is an internal error. A plain run that fails leaves no trace (the staging
 * folder is removed); a worker's files stay in OUT.partial/ until finalize publishes them all.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/core/folder_writer.h"
#include "formats/io/worker_files.h"

namespace swavg {

class staged_dir;

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

class output_folder {
 public:
  // `out`: the folder (trailing slashes dropped). Worker `worker_index` of `worker_count` > 1 writes
  // its shards into OUT.partial/; a plain run (count 1) writes them all and publishes OUT/.
  output_folder(const std::string& out, size_t worker_index, size_t worker_count, bool force);
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
  // is or holds one of `inputs` or lies in one that is a folder (through symlinks too), or when OUT
  // is not empty and --force is off. `inputs` is every file and folder the run reads, a checkpoint's
  // files listed (cli/read_set.h gathers them): a folder read as it is, such as the run folder
  // swavg watch follows, is no checkpoint to look into.
  void refuse_missing_parent() const;
  void refuse_not_folder(const std::string& hint = "") const;
  void refuse_inputs_inside(const std::vector<std::string>& inputs) const;
  void refuse_non_empty() const;

  // 1b. A worker of several: takes its (shared) lock on OUT.partial/ now, before its inputs are
  // read, so that a finalize during a worker's rerun waits for it (exit 6). No-op for a plain run.
  void hold_partial();
  // 2. The format: the writer that plans and writes the files. Before plan_shards() and open().
  void use(std::unique_ptr<folder_writer> writer);
  // 3. Stages OUT/ (a plain run; a worker writes into OUT.partial/, created with the plan).
  // `copied`: names of files in the folder `source` that worker 0 copies beside the files;
  // `options`: the job's, written into the plan (worker_files.h). A worker of several holds its
  // lock from here at the latest.
  void stage(std::string source, std::vector<std::string> copied, job_options options = {});
  // The files of `specs` with `metadata` in each, as open() plans them, for plans (--dry-run):
  // nothing written. planned_file_size(): file `s` of such a plan, as --dry-run shows it.
  shard_layout plan_shards(std::vector<tensor_spec> specs, const std::map<std::string, std::string>& metadata) const;
  planned_size planned_file_size(const shard_layout& layout, size_t s,
                                 const std::map<std::string, std::string>& metadata) const;
  // 3b. After stage(): plans the files of `specs`, writes the plan and opens this worker's files:
  // write() every tensor the sink owns(), in order, then commit().
  output_sink& open(std::vector<tensor_spec> specs, const std::map<std::string, std::string>& metadata);
  // --dry-run of a worker of several: what open() would refuse, nothing written: a plan of another
  // job in OUT.partial/ (mismatch_error, exit 4). `copied`, `options`: as stage() takes them.
  void check_partial_plan(std::vector<tensor_spec> specs, const std::map<std::string, std::string>& metadata,
                          const std::vector<std::string>& copied, const job_options& options) const;
  // 4. After the sink's commit: the copies, then the index and OUT/ published, or the manifest
  // (finalize writes the index).
  void finish();

  const shard_layout& layout() const { return *layout_; }
  const std::string& plan_hash() const { return plan_hash_; }
  const std::vector<written_file>& files() const { return files_; }  // this worker's: shards, copies

 private:
  enum class step { refusing, staged, open, finished };
  // internal error unless the folder is at `at` (and, with `writer`, has one).
  void expect(step at, const char* what, bool writer) const;
  // A plain run keeps the plan's hash; a worker writes it into OUT.partial/ (once, or checks it).
  void record_plan(const std::string& plan);
  const std::string& where() const;  // the folder written now: the staging folder or OUT.partial

  std::string out_;
  std::string partial_;
  size_t worker_index_;
  size_t worker_count_;
  bool force_;
  step step_ = step::refusing;
  std::unique_ptr<folder_writer> writer_;
  std::unique_ptr<staged_dir> stage_;
  std::string source_;
  std::vector<std::string> copied_;
  job_options options_;
  std::unique_ptr<partial_lock> lock_;
  std::optional<shard_layout> layout_;
  std::string plan_hash_;
  std::unique_ptr<folder_sink> sink_;
  std::vector<written_file> files_;
};

}  // namespace swavg
