/*
 * A user's averaging function (--avg-fn / --multi-avg-fn FILE), with the semantics of
 * torch.optim.swa_utils.AveragedModel.update_parameters: the first checkpoint is copied, then for
 * each later one every averaged tensor becomes f(averaged, current, num_averaged), num_averaged a
 * 0-dim int64 tensor on the fold's device holding the checkpoints already averaged (resumed ones
 * included). FILE is TorchScript and runs: it is loaded (through libtorch/module.cpp's
 * load_module) only in swavg-torch and only when these options name it.
 *
 *   avg_fn        forward(Tensor averaged, Tensor current, Tensor num_averaged) -> Tensor, a plain
 *                 scripted function or a module's forward; called on whole tensors, one tensor's
 *                 accumulator held at a time, the inputs wrapped in place where the dtype matches.
 *   multi_avg_fn  forward(List[Tensor] averaged, List[Tensor] current, Tensor num_averaged) -> None,
 *                 updating `averaged` in place; called once per checkpoint after the first with the
 *                 floating averaged tensors in state-dict order, then once with the integer ones
 *                 (--buffers average) if any. Every averaged tensor is held in memory.
 * The function runs in the accumulator dtype (the tensors' own unless --accumulate names one).
 *
 * Seam: load_avg_fn is defined in src/libtorch/scripted_avg_fn.cpp; its stand-in in
 * src/libtorch/without_libtorch.cpp throws needs_libtorch.
 */
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "fold/config.h"
#include "fold/native_fold.h"
#include "fold/plan.h"

namespace swavg {

class avg_function {
 public:
  virtual ~avg_function() = default;
  // avg_fn: the average of one planned tensor.
  virtual void average(const fold_config& c, const tensor_plan& p, const chunk_writer& write) = 0;
  // multi_avg_fn: the averages of all `tensors` (each held by the same inputs: usage_error
  // otherwise, as with --allow-missing), computed checkpoint by checkpoint; in the output dtype,
  // contiguous, on the CPU, in the order given.
  virtual std::vector<tensor_view> average_all(const fold_config& c,
                                               const std::vector<const tensor_plan*>& tensors) = 0;
  // "forward(Tensor averaged, Tensor current, Tensor num_averaged) -> Tensor", as the file declares it.
  virtual std::string signature() const = 0;
};

// Loads and checks `spec.path`: usage_error naming the file, with the expected and the found
// signature, for anything that is not TorchScript with the signature of `spec.kind`.
std::unique_ptr<avg_function> load_avg_fn(const avg_fn_spec& spec);

}  // namespace swavg
