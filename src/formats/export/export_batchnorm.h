/*
 * The BatchNorm modules of a torch.export program, as update-bn replays them. In core ATen (after
 * run_decompositions) a train-mode BatchNorm call is one node
 *   _native_batch_norm_legit_functional(input, weight, bias, running_mean, running_var, training,
 *                                       momentum, eps) -> (out, save_mean, save_rstd, new_mean, new_var)
 * whose new statistics the signature's buffer mutations carry back into the module's buffers, and
 * num_batches_tracked is incremented by an add node. A module called twice per forward chains its
 * calls: the second reads the first's new statistics.
 *
 * A node belongs to the module whose buffers its running statistics trace back to (through earlier
 * calls' outputs 3 and 4). Refused, naming the node: statistics that are no module's buffers, mean
 * and variance of two modules, a call not in training mode, a module whose last call's statistics
 * are not what its buffers are mutated to, and eval-mode BatchNorm
 * (_native_batch_norm_legit_no_training: update_bn has nothing to update there).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "formats/export/export_program.h"

namespace swavg {

struct export_batchnorm {
  std::string module;               // "layer1.0.bn1"
  std::vector<size_t> nodes;        // its calls, in graph order
  std::string num_batches_tracked;  // its buffer, "" when it has none
  int64_t features = 0;
  double momentum = 0.1;  // the first call's, as exported
  bool reached = true;    // false: its buffers are inputs no call reads (update_bn resets them)
};

constexpr const char* kExportBatchNormTarget = "torch.ops.aten._native_batch_norm_legit_functional.default";

// The program's BatchNorm modules in the order of their first call, then those never called (buffers
// running_mean, running_var and num_batches_tracked of one module that no call reads). Throws
// input_error starting with `path`.
std::vector<export_batchnorm> find_export_batchnorms(const export_program& p, const std::string& path);

}  // namespace swavg
