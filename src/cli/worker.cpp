#include "cli/worker.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/error.h"
#include "util/log.h"

namespace swavg {
namespace {

// A decimal integer in [lo, hi], nothing else (no sign, spaces or exponent).
int64_t parse_count(const std::string& text, const std::string& what, int64_t lo, int64_t hi) {
  int64_t v = 0;
  bool ok = !text.empty() && text.size() <= 18;
  for (char ch : text) ok = ok && ch >= '0' && ch <= '9';
  if (ok)
    for (char ch : text) v = v * 10 + (ch - '0');
  if (!ok || v < lo || v > hi)
    throw usage_error(fmt::format("{}='{}': expected an integer from {} to {}", what, text, lo, hi));
  return v;
}

std::optional<std::string> get(const env_lookup& env, const char* name) {
  const char* v = env(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

worker_id checked(const std::string& source, const std::string& index_name, int64_t index, int64_t count) {
  if (index >= count)
    throw usage_error(
        fmt::format("{}={} is out of range for {} workers (0 to {})", index_name, index, count, count - 1));
  return worker_id{static_cast<size_t>(index), static_cast<size_t>(count), source};
}

std::optional<worker_id> from_slurm_array(const env_lookup& env) {
  const auto id = get(env, "SLURM_ARRAY_TASK_ID");
  if (!id) return std::nullopt;
  const auto count = get(env, "SLURM_ARRAY_TASK_COUNT");
  if (!count)
    throw usage_error(
        "SLURM_ARRAY_TASK_ID is set but SLURM_ARRAY_TASK_COUNT is not: sbatch --array sets both; outside "
        "Slurm unset it, or pass --shard I/N");
  const int64_t n = parse_count(*count, "SLURM_ARRAY_TASK_COUNT", 1, kMaxWorkers);
  const int64_t task = parse_count(*id, "SLURM_ARRAY_TASK_ID", 0, kMaxWorkers * kMaxWorkers);
  const auto min_text = get(env, "SLURM_ARRAY_TASK_MIN");
  const int64_t min = min_text ? parse_count(*min_text, "SLURM_ARRAY_TASK_MIN", 0, task) : 0;
  const auto step_text = get(env, "SLURM_ARRAY_TASK_STEP");
  const int64_t step = step_text ? parse_count(*step_text, "SLURM_ARRAY_TASK_STEP", 1, kMaxWorkers * kMaxWorkers) : 1;
  if ((task - min) % step != 0)
    throw usage_error(
        fmt::format("SLURM_ARRAY_TASK_ID={} is not SLURM_ARRAY_TASK_MIN={} plus a multiple of "
                    "SLURM_ARRAY_TASK_STEP={}",
                    task, min, step));
  return checked("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_ID", (task - min) / step, n);
}

std::optional<worker_id> from_pair(const env_lookup& env, const char* index_name, const char* count_name) {
  const auto index = get(env, index_name);
  if (!index) return std::nullopt;
  const auto count = get(env, count_name);
  if (!count)
    throw usage_error(fmt::format("{} is set but {} is not: set both, or pass --shard I/N", index_name, count_name));
  const int64_t n = parse_count(*count, count_name, 1, kMaxWorkers);
  return checked(index_name, index_name, parse_count(*index, index_name, 0, kMaxWorkers), n);
}

}  // namespace

worker_id resolve_worker(const std::string& shard, std::optional<int64_t> shard_count, bool directory_output,
                         const env_lookup& env) {
  if (!shard.empty() && shard_count)
    throw usage_error(
        "--shard I/N and --shard-count N exclude each other (--shard-count is the N of JOB_COMPLETION_INDEX)");
  if (!directory_output && (!shard.empty() || shard_count))
    throw usage_error(fmt::format("{} needs a folder output (-o DIR/): only sharded outputs are split across workers",
                                  shard.empty() ? "--shard-count" : "--shard"));
  if (!directory_output) return worker_id{};
  if (!shard.empty()) {
    const size_t slash = shard.find('/');
    if (slash == std::string::npos) throw usage_error(fmt::format("--shard '{}': expected I/N, e.g. 0/4", shard));
    const int64_t n = parse_count(shard.substr(slash + 1), "--shard " + shard + ": N", 1, kMaxWorkers);
    const int64_t i = parse_count(shard.substr(0, slash), "--shard " + shard + ": I", 0, n - 1);
    return worker_id{static_cast<size_t>(i), static_cast<size_t>(n), "--shard"};
  }
  if (shard_count && (*shard_count < 1 || *shard_count > kMaxWorkers))
    throw usage_error(fmt::format("--shard-count {}: expected an integer from 1 to {}", *shard_count, kMaxWorkers));
  std::optional<worker_id> w = from_slurm_array(env);
  if (!w) w = from_pair(env, "SLURM_PROCID", "SLURM_NTASKS");
  if (!w) w = from_pair(env, "RANK", "WORLD_SIZE");
  if (!w) {
    if (const auto index = get(env, "JOB_COMPLETION_INDEX")) {
      if (!shard_count) throw usage_error("JOB_COMPLETION_INDEX is set: pass --shard-count N, the Job's completions");
      return checked("JOB_COMPLETION_INDEX", "JOB_COMPLETION_INDEX",
                     parse_count(*index, "JOB_COMPLETION_INDEX", 0, kMaxWorkers), *shard_count);
    }
    if (shard_count)
      throw usage_error("--shard-count is the worker count of JOB_COMPLETION_INDEX, which is not set; use --shard I/N");
    return worker_id{};
  }
  if (shard_count) spdlog::warn("--shard-count ignored: the worker comes from {}", w->source);
  return *w;
}

std::string worker_done_message(const worker_id& w, const std::string& partial, size_t files,
                                const std::string& output) {
  return fmt::format(
      "worker {} of {} is done: {} written to {}/; once each of the {} workers is done, run `swavg finalize {}/` to "
      "publish the folder",
      w.index, w.count, counted(files, "file"), partial, w.count, output);
}

}  // namespace swavg
