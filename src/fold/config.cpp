#include "fold/config.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "util/error.h"

namespace swavg {

const char* mode_name(fold_mode m) {
  switch (m) {
    case fold_mode::swa: return "swa";
    case fold_mode::ema: return "ema";
    case fold_mode::weighted: return "weighted";
  }
  return "?";
}

const char* warmup_name(warmup_kind w) {
  switch (w) {
    case warmup_kind::none: return "none";
    case warmup_kind::torch_ema: return "torch_ema";
    case warmup_kind::power: return "power";
  }
  return "?";
}

const char* layout_name(output_layout l) {
  return l == output_layout::averaged_model ? "averaged-model" : "state-dict";
}

std::string decimal(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void validate_config(const fold_config& c, size_t inputs, bool resuming) {
  if (c.mode == fold_mode::ema && !(c.decay >= 0.0 && c.decay <= 1.0))
    throw usage_error(fmt::format("--decay: expected a value in [0, 1], got {}", decimal(c.decay)));
  if (c.mode == fold_mode::weighted) {
    if (c.weights.size() != inputs)
      throw usage_error(
          fmt::format("--weights: {} weights for {} inputs; give one per input", c.weights.size(), inputs));
    double sum = 0;
    for (double w : c.weights) {
      if (!(w >= 0.0) || !std::isfinite(w))
        throw usage_error(fmt::format("--weights: weights must be finite and >= 0, got {}", decimal(w)));
      sum += w;
    }
    if (!(sum > 0)) throw usage_error("--weights: the weights sum to 0");
    if (resuming) throw usage_error("--resume works with equal weights (SWA) and EMA, not with --weights");
  }
  if (c.mode != fold_mode::ema)
    for (const auto& r : c.rules)
      if (r.decay)
        throw usage_error(fmt::format("--rules: the rule for '{}' sets a decay, which only swavg ema uses", r.pattern));
  if (c.warmup == warmup_kind::power && !(c.inv_gamma > 0))
    throw usage_error(fmt::format("--inv-gamma: expected a positive value, got {}", decimal(c.inv_gamma)));
}

}  // namespace swavg
