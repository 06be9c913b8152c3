/*
 * Which share of a sharded output this process writes: `--shard I/N`, or else the first of the
 * environment forms set (the order is part of the CLI contract):
 *   SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN (default 0), divided by SLURM_ARRAY_TASK_STEP when set,
 *     with SLURM_ARRAY_TASK_COUNT   (sbatch --array)
 *   SLURM_PROCID with SLURM_NTASKS  (srun)
 *   RANK with WORLD_SIZE            (torchrun)
 *   JOB_COMPLETION_INDEX with --shard-count N   (Kubernetes Indexed Jobs)
 * Only for directory outputs; a file output is one process's. A count of 1 is a plain run.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "formats/io/worker_files.h"  // kMaxWorkers

namespace swavg {

struct worker_id {
  size_t index = 0;
  size_t count = 1;
  std::string source = "none";  // "--shard", an environment variable's name, or "none"
};

using env_lookup = std::function<const char*(const char*)>;

// usage_error (exit 2) naming the option or variable for a malformed or out-of-range value,
// --shard or --shard-count with a file output, --shard with --shard-count, JOB_COMPLETION_INDEX
// without --shard-count, --shard-count with no JOB_COMPLETION_INDEX.
worker_id resolve_worker(const std::string& shard, std::optional<int64_t> shard_count, bool directory_output,
                         const env_lookup& env);

// The line a worker of several ends with: where it wrote how many files, and what to run next.
std::string worker_done_message(const worker_id& w, const std::string& partial, size_t files,
                                const std::string& output);

}  // namespace swavg
