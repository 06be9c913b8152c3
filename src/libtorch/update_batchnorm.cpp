/*
 * The update-bn seam (bn_replay.h): the model's kind decides the replay: a torch.export program
 * through export_replay.cpp, a TorchScript module through LibTorch's jit loader and bn_replay.cpp.
 */
#include <spdlog/spdlog.h>

#include <optional>

#include "fold/layout.h"
#include "formats/io/load.h"
#include "libtorch/bn_replay.h"
#include "libtorch/bn_weights.h"
#include "libtorch/export_replay.h"
#include "libtorch/module.h"

namespace swavg {

update_bn_result update_batchnorm(const std::string& model_path, const std::vector<named_tensor>& weights,
                                  const std::string& weights_source, const dataset& data, const bn_options& options) {
  if (model_kind(model_path) == input_kind::export_program)
    return update_batchnorm_exported(model_path, weights, weights_source, data, options);
  update_bn_result result;
  result.module = load_module(model_path);
  std::vector<named_tensor> w = weights;
  std::optional<named_tensor> n_averaged;
  const bool averaged = result.averaged_layout = from_averaged_layout(w, n_averaged);
  if (averaged) spdlog::info("{}: averaged-model layout (module.* and n_averaged)", weights_source);
  if (!w.empty()) load_weights(*result.module, w, weights_source);
  result.report = replay_batchnorm(*result.module, data, options, model_path);
  result.tensors = module_state(*result.module);
  if (averaged) to_averaged_layout(result.tensors, std::move(*n_averaged));
  return result;
}

}  // namespace swavg
