#include "fold/schedule.h"

#include <algorithm>
#include <cmath>

namespace swavg {

double ema_decay_at(const fold_config& c, int64_t n, std::optional<double> rule_decay) {
  const double decay = rule_decay.value_or(c.decay);
  const double step = static_cast<double>(n);
  switch (c.warmup) {
    case warmup_kind::none: return decay;
    case warmup_kind::torch_ema: return std::min(decay, (1.0 + step) / (10.0 + step));
    case warmup_kind::power: {
      double d = 1.0 - std::pow(1.0 + step / c.inv_gamma, -c.power);
      return std::max(c.min_decay, std::min(d, decay));
    }
  }
  return decay;
}

double ema_decay_for(const fold_config& c, std::optional<double> rule_decay, size_t input, int64_t n) {
  if (!c.power_ema) return ema_decay_at(c, n, rule_decay);
  const power_function_ema& p = *c.power_ema;
  const double previous = input == 0 ? p.start_time : p.times[input - 1];
  const double t = p.times[input];
  return std::pow(1.0 - (t - previous) / t, p.gamma + 1.0);
}

double fold_weight(const fold_config& c, std::optional<double> rule_decay, size_t input, int64_t k,
                   double& weight_total) {
  if (c.mode == fold_mode::ema) return 1.0 - ema_decay_for(c, rule_decay, input, k);
  weight_total += c.weights[input];
  return weight_total > 0 ? c.weights[input] / weight_total : 1.0;
}

std::vector<double> lerp_weights(const fold_config& c, const tensor_plan& p) {
  std::vector<double> weights;
  weights.reserve(p.sources.size());
  int64_t k = p.resumed ? p.resumed_count : 0;
  double weight_total = 0.0;
  for (const fold_source& s : p.sources) {
    if (k == 0) {
      weight_total = c.mode == fold_mode::weighted ? c.weights[s.input] : 0.0;
      weights.push_back(0.0);
    } else {
      weights.push_back(fold_weight(c, p.rule_decay, s.input, k, weight_total));
    }
    ++k;
  }
  return weights;
}

std::vector<double> normalised_weights(const fold_config& c) {
  if (c.mode != fold_mode::weighted) return {};
  double sum = 0.0;
  for (double w : c.weights) sum += w;
  std::vector<double> out;
  for (double w : c.weights) out.push_back(w / sum);
  return out;
}

}  // namespace swavg
