#include "fold/config.h"

#include <fmt/format.h>

#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <string>

#include "util/decimal.h"
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

const char* buffer_policy_name(buffer_policy b) {
  switch (b) {
    case buffer_policy::latest: return "latest";
    case buffer_policy::first: return "first";
    case buffer_policy::average: return "average";
  }
  return "?";
}

const char* avg_fn_option(avg_fn_kind k) { return k == avg_fn_kind::multi_avg_fn ? "--multi-avg-fn" : "--avg-fn"; }

namespace {

void check_real(const char* option, double v, bool ok, const char* range, const std::string& hint = "") {
  if (!std::isfinite(v) || !ok)
    throw usage_error(fmt::format("{}: expected {}, got {}{}", option, range, decimal(v), hint));
}

// A decay out of [0, 1] whose intent is plain: 999 or 99.9 for 0.999 (the digits after "0."), -0.99
// for 0.99. Only a reading in [0.5, 1) is offered: a decay near 1, as EMA decays are.
std::string decay_hint(double v) {
  if (!std::isfinite(v) || (v >= 0.0 && v <= 1.0)) return "";
  if (v < 0.0) return v <= -0.5 && v >= -1.0 ? fmt::format(" (did you mean {}?)", decimal(-v)) : "";
  std::string digits;
  for (char ch : decimal(v)) {
    if (ch == 'e' || ch == 'E') return "";
    if (ch != '.') digits += ch;
  }
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const std::string meant = "0." + digits;
  const double m = std::strtod(meant.c_str(), nullptr);
  return m >= 0.5 && m < 1.0 ? fmt::format(" (did you mean {}?)", meant) : "";
}

void validate_ema(const fold_config& c) {
  check_real("--decay", c.decay, c.decay >= 0.0 && c.decay <= 1.0, "a value in [0, 1]", decay_hint(c.decay));
  check_real("--inv-gamma", c.inv_gamma, c.inv_gamma > 0.0, "a finite value > 0");
  check_real("--power", c.power, c.power > 0.0, "a finite value > 0");
  check_real("--min-decay", c.min_decay, c.min_decay >= 0.0 && c.min_decay <= c.decay,
             fmt::format("a value in [0, --decay] = [0, {}]", decimal(c.decay)).c_str(),
             c.min_decay > 1.0 || c.min_decay < 0.0 ? decay_hint(c.min_decay) : "");
}

void validate_power_ema(const fold_config& c, size_t inputs) {
  const power_function_ema& p = *c.power_ema;
  if (p.times.size() != inputs)
    throw usage_error(
        fmt::format("--power-sigma-rel: {} training times for {} inputs; give one per input", p.times.size(), inputs));
  double previous = p.start_time;
  for (size_t i = 0; i < p.times.size(); ++i) {
    if (!std::isfinite(p.times[i]) || !(p.times[i] > previous))
      throw usage_error(fmt::format(
          "--power-sigma-rel: training times must be finite and strictly increasing in fold order{}: input {} has "
          "t = {} after t = {}",
          p.start_time > 0 ? " (after the resumed average's)" : " and > 0", i + 1, p.times[i], previous));
    previous = p.times[i];
  }
  for (const auto& r : c.rules)
    if (r.decay)
      throw usage_error(
          fmt::format("--rules: the rule for '{}' sets a decay, which --power-sigma-rel replaces", r.pattern));
}

void validate_weights(const std::vector<double>& weights, size_t inputs, bool resuming) {
  if (weights.size() != inputs)
    throw usage_error(fmt::format("--weights: {} weights for {} inputs; give one per input", weights.size(), inputs));
  double sum = 0;
  for (double w : weights) {
    if (!(w >= 0.0) || !std::isfinite(w))
      throw usage_error(fmt::format("--weights: weights must be finite and >= 0, got {}", decimal(w)));
    sum += w;
  }
  if (!(sum > 0)) throw usage_error("--weights: the weights sum to 0");
  if (!std::isfinite(sum))
    throw usage_error(fmt::format("--weights: the weights sum to more than {}; scale them down", decimal(DBL_MAX)));
  if (resuming) throw usage_error("--resume works with equal weights (SWA) and EMA, not with --weights");
}

}  // namespace

void validate_config(const fold_config& c, size_t inputs, bool resuming) {
  if (c.avg_fn && c.mode != fold_mode::swa)
    throw usage_error(fmt::format("{} replaces the equal-weight average: it cannot be combined with {}",
                                  avg_fn_option(c.avg_fn->kind), c.mode == fold_mode::ema ? "ema" : "--weights"));
  if (c.mode == fold_mode::ema) validate_ema(c);
  if (c.mode == fold_mode::ema && c.power_ema) validate_power_ema(c, inputs);
  if (c.mode == fold_mode::weighted) validate_weights(c.weights, inputs, resuming);
  for (const auto& r : c.rules) {
    if (!r.decay) continue;
    if (c.mode != fold_mode::ema)
      throw usage_error(fmt::format("--rules: the rule for '{}' sets a decay, which only swavg ema uses", r.pattern));
    if (!(*r.decay >= 0.0 && *r.decay <= 1.0))
      throw usage_error(fmt::format("--rules: the rule for '{}' has decay {}, expected a value in [0, 1]", r.pattern,
                                    decimal(*r.decay)));
  }
}

}  // namespace swavg
