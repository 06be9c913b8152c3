#include "core/fold_pipeline.h"

#include <unistd.h>

#include <spdlog/spdlog.h>

#include "io/load.h"
#include "io/save.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace swavg {
namespace {

// The fold's own output, removed when the pipeline ends, whatever happens.
struct temp_output {
  std::string path;
  ~temp_output() { ::unlink(path.c_str()); }
};

}  // namespace

pipeline_report run_fold_pipeline(const fold_job& job, const std::optional<bn_step>& bn) {
  pipeline_report report;
  if (!bn) {
    report.fold = run_fold(job);
    return report;
  }
  if (job.model.empty()) throw usage_error("--update-bn needs --model NET.ts, the TorchScript model to replay data through");
  require_libtorch("--update-bn");
  std::vector<std::string> inputs = job.inputs;
  inputs.push_back(job.model);
  inputs.push_back(bn->data.path);
  check_output_path(job.output, inputs, job.force);
  const output_format format = choose_output_format(job.output, job.format);
  const dataset data = open_dataset(bn->data);

  temp_output folded{temp_path_beside(job.output, "fold")};
  fold_job fold = job;
  fold.output = folded.path;
  fold.format = format == output_format::torch ? "torch" : "safetensors";
  fold.force = true;
  report.fold = run_fold(fold);
  report.fold.output = job.output;

  state_dict averaged = load_state_dict(folded.path);
  bn_options options = bn->options;
  options.device = job.config.device;
  update_bn_result updated = update_batchnorm(job.model, averaged.tensors, job.output, data, options);
  spdlog::info("{}: {} BatchNorm modules updated from {} batches", job.model, updated.report.modules.size(),
               updated.report.batches);
  std::map<std::string, std::string> metadata = averaged.metadata;
  metadata["swavg_update_bn"] = bn_report_json(updated.report);
  report.fold.bytes_written = save_state_dict(job.output, updated.tensors, format, metadata);
  report.bn = std::move(updated.report);
  return report;
}

}  // namespace swavg
