/*
 * The files shard-parallel workers leave in OUT.partial/ beside their shards, and `swavg finalize`,
 * which publishes them as OUT/.
 *
 * Every worker writes the same plan (swavg-plan.json: the layout, the metadata, the files copied),
 * made from the inputs' headers and the options only, so the plan's SHA-256 names the job; then its
 * shards and, last, its manifest (swavg-worker-<I>-of-<N>.json: plan hash, index, count, files with
 * size and SHA-256). finalize checks them all against the plan before publishing.
 */
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "formats/shard_layout.h"

namespace swavg {

inline constexpr const char* kPlanName = "swavg-plan.json";
inline constexpr const char* kManifestPrefix = "swavg-worker-";

std::string manifest_name(size_t index, size_t count);  // swavg-worker-<I>-of-<N>.json

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

}  // namespace swavg
