#include "cli/pipeline.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "fold/aten.h"
#include "fold/execute.h"
#include "formats/torchscript.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace swavg {
namespace {

// Refuses, before anything is read, outputs that are inputs, exist (without --force), are not
// regular files, or are one another. `inputs`: every file the job reads besides --resume.
void check_paths(const fold_job& job, const std::vector<std::string>& inputs) {
  check_distinct_paths({{"--report", job.report_file}, {"-o", job.output}});
  check_distinct_paths({{"--report", job.report_file}, {"--resume", job.resume}});
  check_output_path(job.output, inputs, job.force);
  if (job.report_file.empty()) return;
  std::vector<std::string> read = inputs;
  if (!job.resume.empty()) read.push_back(job.resume);
  check_output_path(job.report_file, read, true);
}

// Every file the inputs read: a sharded checkpoint's index and shards, so no output can be one.
std::vector<std::string> input_files(const fold_job& job) {
  std::vector<std::string> files;
  for (const auto& in : job.inputs)
    for (auto& f : checkpoint_files(in)) files.push_back(std::move(f));
  return files;
}

std::vector<state_dict> load_checkpoints(const fold_job& job) {
  std::vector<state_dict> inputs;
  inputs.reserve(job.inputs.size());
  for (const auto& path : job.inputs) inputs.push_back(load_state_dict(path, job.load));
  // Without --key each input's state dict is found on its own: they must agree, or the average
  // would mix, say, one input's EMA weights with another's raw ones.
  auto where = [](const state_dict& sd) { return sd.key.empty() ? std::string("the top level") : "'" + sd.key + "'"; };
  bool same = true;
  for (const auto& sd : inputs) same &= sd.key == inputs.front().key;
  if (!same) {
    std::string list;
    for (const auto& sd : inputs) list += fmt::format("\n  {}: {}", sd.path, where(sd));
    throw mismatch_error(fmt::format("the inputs' state dicts were found at different places:{}\nchoose one with "
                                     "--key PATH (it must exist in every input)",
                                     list));
  }
  if (!inputs.front().key.empty()) spdlog::info("took the state dict at '{}' in each input", inputs.front().key);
  return inputs;
}

fold_inputs load_fold_inputs(const fold_job& job) {
  fold_inputs in;
  in.checkpoints = load_checkpoints(job);
  if (!job.resume.empty()) in.resume.emplace(open_resumed(load_state_dict(job.resume, load_options{}), job.config));
  if (!job.model.empty())
    for (const auto& t : read_torchscript(job.model).tensors) in.model_kinds[t.name] = t.kind;
  return in;
}

}  // namespace

fold_report run_fold_job(const fold_job& job) {
  const auto start = std::chrono::steady_clock::now();
  const fold_config& c = job.config;
  validate_config(c, job.inputs.size(), !job.resume.empty());
  check_device(c.device);
  std::vector<std::string> guarded = input_files(job);
  if (!job.model.empty()) guarded.push_back(job.model);
  check_paths(job, guarded);
  const output_format format = choose_output_format(job.output, job.format);

  const fold_result result = run_fold(c, load_fold_inputs(job), fold_target{job.output, format, job.drop_objects});

  fold_report report;
  report.inputs = job.inputs;
  report.resume = job.resume;
  report.output = job.output;
  report.format = format;
  report.mode = c.mode;
  report.decay = c.decay;
  report.n = result.n;
  report.tensors = result.tensors;
  for (const auto& e : result.carried) report.carried.push_back({e.entry.name, e.entry.type, e.from});
  report.objects_dropped = result.objects_dropped;
  report.tied = result.tied;
  report.bytes_read = result.bytes_read;
  report.bytes_written = result.bytes_written;
  report.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

uint64_t save_updated_state(const std::string& path, output_format format, const update_bn_result& updated,
                            std::map<std::string, std::string> metadata, const std::vector<object_entry>& objects) {
  metadata["swavg_update_bn"] = bn_report_json(updated.report);
  return save_state_dict(path, updated.tensors, format, metadata, objects);
}

pipeline_report run_fold_pipeline(const fold_job& job, const std::optional<bn_step>& bn) {
  pipeline_report report;
  if (!bn) {
    report.fold = run_fold_job(job);
    return report;
  }
  if (job.model.empty())
    throw usage_error("--update-bn needs --model NET.ts, the TorchScript model to replay data through");
  require_libtorch("--update-bn");
  std::vector<std::string> inputs = input_files(job);
  inputs.push_back(job.model);
  inputs.push_back(bn->data.path);
  check_paths(job, inputs);
  const output_format format = choose_output_format(job.output, job.format);
  const dataset data = open_dataset(bn->data);

  held_temp folded(temp_path_beside(job.output, "fold"));
  fold_job fold = job;
  fold.output = folded.path();
  fold.format = format;
  fold.force = true;
  fold.report_file.clear();
  report.fold = run_fold_job(fold);
  report.fold.output = job.output;
  folded.hold();

  state_dict averaged = load_state_dict(folded.path());
  bn_options options = bn->options;
  options.device = job.config.device;
  update_bn_result updated = update_batchnorm(job.model, averaged.tensors, job.output, data, options);
  spdlog::info("{}: {} BatchNorm modules updated from {} batches", job.model, updated.report.modules.size(),
               updated.report.batches);
  report.fold.bytes_written = save_updated_state(job.output, format, updated, averaged.metadata, averaged.objects);
  report.bn = std::move(updated.report);
  return report;
}

}  // namespace swavg
