/*
 * Every seam's stand-in, in one file: what the swavg binary built without LibTorch has in place of
 * the functions src/libtorch/ defines. LibTorch costs about half a second of start-up (its operator
 * registry is built by static initialisers), more than reading a large checkpoint, so `swavg` does
 * not load it: inspect, convert, average and ema run there (TorchScript files included: they are
 * read by formats/torch/torchscript.cpp) whenever swavg's own kernels cover the job. Everything else
 * (update-bn, GPUs, complex averages, --avg-fn) throws
 * needs_libtorch before any output is written, and main() hands the same command line to
 * swavg-torch, the same program linked with LibTorch. The fuzz drivers link this file too.
 *
 * scripts/check_layers.py checks that each function here is declared once and defined once more,
 * in src/libtorch/.
 */
#include <fmt/format.h>

#include <cstdlib>

#include "fold/aten.h"
#include "fold/avg_fn.h"
#include "fold/native_kernels.h"
#include "libtorch/bn_replay.h"
#include "libtorch/save_module.h"
#include "util/error.h"

namespace swavg {

void require_libtorch(const std::string& why) { throw needs_libtorch(why); }

// Without LibTorch to probe, the native lerp is trusted only where it is known to be ATen's: the
// LibTorch this was built against, on its FMA path, with no CPU capability forced.
std::optional<lerp_form> lerp_form_for(dtype acc, dtype in) {
  if (!cpu_has_avx2_fma() || std::getenv("ATEN_CPU_CAPABILITY") != nullptr) return std::nullopt;
  if (!is_native_accumulator(acc) || !is_floating(in)) return std::nullopt;
  return built_lerp_form();
}

void check_device(const device_spec& device) {
  if (!device.is_cpu()) require_libtorch("--device " + device_name(device));
}

void aten_average(const fold_config&, const tensor_plan& p, const chunk_writer&) {
  require_libtorch(fmt::format("averaging tensor '{}' with ATen", p.name));
}

std::unique_ptr<avg_function> load_avg_fn(const avg_fn_spec& spec) {
  require_libtorch(fmt::format("{} {} (a TorchScript function)", avg_fn_option(spec.kind), spec.path));
  return nullptr;
}

update_bn_result update_batchnorm(const std::string&, const std::vector<named_tensor>&, const std::string&,
                                  const dataset&, const bn_options&) {
  require_libtorch("update-bn");
  return {};
}

uint64_t save_module(const torch::jit::Module&, const std::string&) {
  require_libtorch("writing a TorchScript module");
  return 0;
}

}  // namespace swavg
