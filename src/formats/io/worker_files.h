/*
 * The files shard-parallel workers leave in OUT.partial/ beside their shards, and `swavg finalize`,
 * which publishes them as OUT/.
 *
 * Every worker writes the same plan (swavg-plan.json: the layout, the metadata, the files copied and
 * the job's options, every one that changes an output byte), made from the inputs' headers and the
 * options only, so the plan's SHA-256 names the job; then its shards and, last, its manifest
 * (swavg-worker-<I>-of-<N>.json: plan hash, index, count, files with size and SHA-256). finalize
 * checks them all against the plan before publishing. No input folder can supply a file of these
 * names: copying refuses them (is_job_file_name).
 *
 * Locks: a worker holds a shared flock on OUT.partial/ while it writes there, finalize an exclusive
 * one; neither waits: the one that cannot lock exits 6 (incomplete), so a worker's rerun blocks
 * finalize and two finalizers never write at once (the second exits 6; run it again).
 *
 * finalize can be killed at any step and run again: before anything is removed it writes the job's
 * files, in one record, beside OUT (OUT.swavg-finalize.json); a finalize that finds the record
 * finishes from it (and removes it), whether OUT.partial/ was renamed yet or not. The index it
 * writes into OUT.partial/ carries a name no worker writes, and is rewritten by a retry. For the
 * tests, SWAVG_FINALIZE_KILL_AT=<step> makes finalize SIGKILL itself after that step: locked,
 * checked, temps, index, record, manifest (the first removed), manifests, plan, renamed.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "formats/core/folder_writer.h"

namespace swavg {

// The folder shard-parallel workers write into before `swavg finalize` publishes it: OUT + this.
inline constexpr const char* kPartialSuffix = ".partial";
// Bounds on what a plan or manifest may claim, checked before any loop over them (and kMaxShards,
// folder_writer.h).
inline constexpr int64_t kMaxWorkers = 1'000'000;
inline constexpr uint64_t kMaxJobFileBytes = 64 << 20;  // a plan or a manifest

// The options of a job that change an output byte, in the order the command line names them:
// ("--weights", "0.25,0.75"), ... Workers whose options differ are of different jobs.
using job_options = std::vector<std::pair<std::string, std::string>>;

std::string manifest_name(size_t index, size_t count);  // swavg-worker-<I>-of-<N>.json

struct job_plan {
  shard_layout layout;  // specs hold names only; the index as its name and bytes
  std::vector<std::string> copied;
  size_t workers = 1;
};

// The plan file's text (identical for every worker of the job) and its parse (input_error when it
// is not one).
std::string plan_json(const shard_layout& layout, const std::map<std::string, std::string>& metadata,
                      const std::vector<std::string>& copied, size_t workers, const job_options& options = {});
job_plan parse_plan(const std::string& text, const std::string& path);

// Writes the index of `layout` (its name and bytes: an index JSON, DCP's .metadata) into `folder`,
// atomically, and returns it, hashed.
written_file write_index(const std::string& folder, const shard_layout& layout);

struct worker_manifest {
  std::string plan_hash;
  size_t index = 0, count = 1;
  std::vector<written_file> files;
};
std::string manifest_json(const worker_manifest& m);
worker_manifest parse_manifest(const std::string& text, const std::string& path);

// OUT without its trailing slash + kPartialSuffix: where workers write.
std::string partial_dir_of(const std::string& out);
// usage_error, saying where it points and what to do, when `partial` (OUT.partial) is a symlink.
void refuse_partial_link(const std::string& partial);

// Writes the plan into `partial` unless a worker did already; mismatch_error (exit 4) when the plan
// there is another job's, naming the first option that differs (or the worker count, or the
// inputs). Returns the plan's SHA-256.
std::string write_plan_once(const std::string& partial, const std::string& plan_text);
// The same check without writing: mismatch_error when `partial` holds a plan other than `plan_text`.
void check_plan_there(const std::string& partial, const std::string& plan_text);
// incomplete_error (exit 6) when an interrupted finalize left its record beside `out`.
void refuse_interrupted_finalize(const std::string& out);

struct finalize_result {
  std::string plan_hash;
  job_plan plan;
  std::vector<written_file> files;  // every file published, the index included
  std::vector<std::string> removed_temps;
  // Nothing was left to finalize: no OUT.partial/, no record, and OUT/ is a folder holding files (a
  // finalize ran to its end before, or was killed after removing its record). The rest is empty.
  bool already_published = false;
};

// A worker's shared lock on OUT.partial/ (created if missing), held while it lives.
// incomplete_error (exit 6) while a finalize holds it or left its record beside OUT.
class partial_lock {
 public:
  explicit partial_lock(const std::string& out);
  ~partial_lock();
  partial_lock(const partial_lock&) = delete;
  partial_lock& operator=(const partial_lock&) = delete;

 private:
  int fd_ = -1;
};

// Checks OUT.partial/ (the plan, every worker's manifest, every file's size and, with `verify`,
// SHA-256), writes the plan's index (write_index), records the job beside OUT, removes the plan
// and manifests, fsyncs the folder and renames it to OUT (then fsyncs OUT's parent), and removes the record.
// incomplete_error (exit 6) while a worker's manifest is missing, a worker is writing or another
// finalize runs; input_error (3) for a plan or manifest that is malformed, past the bounds above or
// not a regular file; mismatch_error (4) for a manifest of another plan or count, or files no
// manifest lists; io_error (5) for a file missing, of another size or another digest. Nothing is
// published on error. With the record of a killed finalize, finishes that one. With neither
// OUT.partial/ nor a record, an OUT/ that is a folder holding files is the work done:
// already_published, no error (so a retry loop on exit 6 ends).
finalize_result finalize_partial(const std::string& out, bool verify, bool force);

}  // namespace swavg
