#include "fold/weight_recipes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "util/decimal.h"
#include "util/error.h"

namespace swavg {
namespace {

constexpr double kPi = 3.14159265358979323846;

double wsm_decay_value(wsm_shape shape, double x) {
  switch (shape) {
    case wsm_shape::linear: return 1.0 - x;
    case wsm_shape::cosine: return 0.5 * (1.0 + std::cos(kPi * x));
    case wsm_shape::one_minus_sqrt: return 1.0 - std::sqrt(x);
    case wsm_shape::given: break;
  }
  return 0.0;
}

std::vector<double> wsm_decay_values(const weight_recipe& r, size_t n) {
  const size_t k = n - 1;
  if (r.shape != wsm_shape::given) {
    std::vector<double> w(k);
    for (size_t j = 1; j <= k; ++j)
      w[j - 1] = wsm_decay_value(r.shape, static_cast<double>(j) / static_cast<double>(n));
    return w;
  }
  if (r.decay_values.size() != k)
    throw usage_error(
        fmt::format("--weights {}: {} decay value{} for {} checkpoint{}; WSM merges k + 1 checkpoints "
                    "with k values, so give {}",
                    r.text, r.decay_values.size(), r.decay_values.size() == 1 ? "" : "s", n, n == 1 ? "" : "s", k));
  for (size_t j = 0; j < k; ++j) {
    const double w = r.decay_values[j];
    const double before = j == 0 ? 1.0 : r.decay_values[j - 1];
    if (!(w >= 0.0 && w <= before))
      throw usage_error(
          fmt::format("--weights {}: value {} is {}: a decay schedule runs from 1 down to 0, each "
                      "value in [0, {}] (the one before)",
                      r.text, j + 1, decimal(w), decimal(before)));
  }
  return r.decay_values;
}

std::vector<double> wsm_weights(const weight_recipe& r, size_t n) {
  const std::vector<double> w = wsm_decay_values(r, n);
  const size_t k = n - 1;
  std::vector<double> c(n);
  if (k == 0) {
    c[0] = 1.0;
    return c;
  }
  c[0] = 1.0 - w[0];
  for (size_t j = 1; j < k; ++j) c[j] = w[j - 1] - w[j];
  c[k] = w[k - 1];
  for (double& x : c) x = std::max(x, 0.0);  // 1 - cos(...) rounding below 0 by an ulp
  return c;
}

std::vector<double> ema_weights(const weight_recipe& r, size_t n) {
  if (!(r.decay >= 0.0 && r.decay <= 1.0))
    throw usage_error(fmt::format("--weights {}: the decay must be in [0, 1], got {}", r.text, decimal(r.decay)));
  std::vector<double> w(n);
  for (size_t i = 1; i <= n; ++i) {
    const double tail = std::pow(r.decay, static_cast<double>(n - i));
    w[i - 1] = i == 1 ? tail : (1.0 - r.decay) * tail;
  }
  return w;
}

std::vector<double> step_weights(const weight_recipe& r, size_t n, const std::vector<std::optional<int64_t>>& steps) {
  std::vector<double> w(n);
  for (size_t i = 0; i < n; ++i) {
    if (i >= steps.size() || !steps[i])
      throw usage_error(fmt::format("--weights {}: checkpoint {} has no step", r.text, i + 1));
    w[i] = static_cast<double>(*steps[i]);
  }
  return w;
}

}  // namespace

std::vector<double> recipe_weights(const weight_recipe& r, size_t n, const std::vector<std::optional<int64_t>>& steps) {
  if (n == 0) return {};
  switch (r.kind) {
    case weight_recipe_kind::sma: return std::vector<double>(n, 1.0);
    case weight_recipe_kind::wma: {
      std::vector<double> w(n);
      for (size_t i = 0; i < n; ++i) w[i] = static_cast<double>(i + 1);
      return w;
    }
    case weight_recipe_kind::wma_step: return step_weights(r, n, steps);
    case weight_recipe_kind::ema: return ema_weights(r, n);
    case weight_recipe_kind::wsm: return wsm_weights(r, n);
  }
  return {};
}

}  // namespace swavg
