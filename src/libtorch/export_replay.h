/*
 * update-bn for a torch.export program (.pt2, saved after run_decompositions()): the result of
 * torch.optim.swa_utils.update_bn on the exported model, bit for bit on the CPU.
 *
 * update_bn resets every BatchNorm (running mean 0, variance 1, num_batches_tracked 0), sets its
 * momentum to None and runs the batches in train mode; each call then increments
 * num_batches_tracked to n and updates the statistics with momentum 1/n, which is a cumulative
 * average. The graph holds each call as one _native_batch_norm_legit_functional node
 * (formats/export/export_batchnorm.h), so swavg runs the graph (export_runner.h) with each node's
 * momentum set to 1/n, n counting that module's calls from the first batch on: the same kernel with
 * the same arguments as update_bn's forward. The buffer mutations the signature lists are carried
 * from one batch to the next, as the module's buffers are in Python.
 *
 * The weights are bound by the signature's names, strictly as load_state_dict(strict=True) except
 * that BatchNorm statistics may be missing: a missing or unexpected tensor, or one whose shape
 * differs, is mismatch_error. The user's input is checked against the program's declared input
 * (rank, fixed sizes, the batch dimension's range) before the first batch runs.
 */
#pragma once

#include <string>
#include <vector>

#include "libtorch/bn_replay.h"

namespace swavg {

update_bn_result update_batchnorm_exported(const std::string& program_path, const std::vector<named_tensor>& weights,
                                           const std::string& weights_source, const dataset& data,
                                           const bn_options& options);

}  // namespace swavg
