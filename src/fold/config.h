/*
 * What a fold computes, as the command line decided it: the mode and its schedule, which tensors
 * are averaged and how (buffers, integer tensors, rules), precision, checks, device and layout.
 * Every choice is an enum by the time it gets here; the strings stay in src/cli/.
 */
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fold/rules.h"
#include "tensor/device.h"
#include "tensor/dtype.h"

namespace swavg {

enum class fold_mode { swa, ema, weighted };
// latest: the last input's (PyTorch 2.x's use_buffers=False); first: the first input's (1.13's
// use_buffers=False); average: as AveragedModel(use_buffers=True).
enum class buffer_policy { latest, first, average };
enum class int_policy { latest, first, error };
enum class warmup_kind { none, torch_ema, power };
enum class accumulate_policy { automatic, native, float32, float64 };
enum class output_layout { state_dict, averaged_model };
// A TorchScript averaging function replacing SWA's arithmetic (fold/avg_fn.h): --avg-fn (avg_fn,
// tensor by tensor) or --multi-avg-fn (PyTorch 2.x's multi_avg_fn, every tensor at once).
enum class avg_fn_kind { avg_fn, multi_avg_fn };

// The names the command line and swavg's metadata use: "swa"; "torch_ema"; "averaged-model".
const char* mode_name(fold_mode m);
const char* warmup_name(warmup_kind w);
const char* layout_name(output_layout l);
const char* buffer_policy_name(buffer_policy b);
const char* avg_fn_option(avg_fn_kind k);  // "--avg-fn", "--multi-avg-fn"

struct avg_fn_spec {
  avg_fn_kind kind = avg_fn_kind::avg_fn;
  std::string path;
  std::string sha256;  // of the file: the resume record names the function by it
};

// EDM2's power-function EMA (ema --power-sigma-rel), folded over checkpoints at training times
// t_1 < t_2 < ...: beta_k = (t_{k-1} / t_k)^(gamma + 1), the first copied (t_0 = 0, or the last time
// of a resumed average). With t_k = k this is EDM2's per-step beta (1 - 1/t)^(gamma + 1); for sparse
// checkpoints it is the profile posthoc-ema assumes of a snapshot (phema.h).
struct power_function_ema {
  double sigma_rel = 0.0;
  double gamma = 0.0;
  std::vector<double> times;  // one per input, in fold order
  double start_time = 0.0;    // t_0
};

struct fold_config {
  fold_mode mode = fold_mode::swa;
  double decay = 0.999;
  warmup_kind warmup = warmup_kind::none;
  double inv_gamma = 1.0;
  double power = 2.0 / 3.0;
  double min_decay = 0.0;
  std::optional<power_function_ema> power_ema;  // replaces decay and warmup when set
  std::vector<double> weights;                  // weighted mode: one per input, in fold order
  std::string weights_recipe;  // weighted mode: the recipe they came from (fold/weight_recipes.h), "" a list
  buffer_policy buffers = buffer_policy::latest;
  int_policy ints = int_policy::latest;
  std::vector<tensor_rule> rules;
  std::vector<std::string> buffer_patterns;  // extra buffer names (regex, searched)
  // With an avg_fn the command line sets native unless --accumulate names a type: the function
  // runs in the tensors' own dtype, as in PyTorch.
  accumulate_policy accumulate = accumulate_policy::automatic;
  std::optional<dtype> output_dtype;  // for floating tensors
  bool allow_missing = false;
  bool allow_nonfinite = false;
  device_spec device;
  output_layout layout = output_layout::state_dict;
  std::optional<avg_fn_spec> avg_fn;  // swa mode only
  // How the inputs were chosen (fold/selection.h's selection_object), null when every input given was
  // taken: kept in the resume record and the report, never read by the fold.
  nlohmann::ordered_json selection;
};

// Throws usage_error, naming the option and the accepted range, for a configuration no fold of
// `inputs` checkpoints (continuing an earlier average when `resuming`) can run: for ema a decay
// outside [0, 1], inv_gamma or power not finite and > 0, min_decay outside [0, decay]; weights not
// finite and >= 0, or not one per input, or summing to 0 or to more than the largest double; a
// rule's decay outside [0, 1] or outside ema; an avg_fn outside swa mode; for a power-function EMA, times
// not finite, > 0 and strictly increasing from start_time, not one per input, or a rule with a decay.
void validate_config(const fold_config& c, size_t inputs, bool resuming);

}  // namespace swavg
