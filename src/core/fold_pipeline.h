/*
 * `swavg average|ema ... --update-bn`: fold the checkpoints, then recompute the BatchNorm statistics
 * of the average by replaying data through the model, and write the result once. The fold goes to
 * a temp file beside the output; only the final, updated state dict is renamed into place, so the
 * output is never a half-finished average.
 */
#pragma once

#include <optional>
#include <string>

#include "bn/dataset.h"
#include "bn/update_bn.h"
#include "core/averager.h"

namespace swavg {

struct bn_step {
  dataset_options data;
  bn_options options;
};

struct pipeline_report {
  fold_report fold;
  std::optional<bn_report> bn;
};

// Runs `job` and, with `bn`, the BatchNorm recomputation on its result (job.model is the
// TorchScript model, required then). Nothing appears at job.output unless every step succeeds.
pipeline_report run_fold_pipeline(const fold_job& job, const std::optional<bn_step>& bn);

}  // namespace swavg
