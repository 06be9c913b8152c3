/*
 * Named weightings for `average --weights`, computed for the N checkpoints a selection kept, in fold
 * (step) order, i = 1..N:
 *   sma        w_i = 1                                   (PMA's simple moving average)
 *   wma        w_i = i                                   (PMA's weighted moving average: linear in position)
 *   wma-step   w_i = step_i                              (linear in the step each checkpoint records)
 *   ema:D      w_1 = D^(N-1), w_i = (1 - D) D^(N-i)      (the weights `ema --decay D` gives each checkpoint)
 *   wsm:SHAPE  WSM (arXiv 2507.17634): checkpoints theta_0..theta_k (k = N - 1) merged with
 *              c_0 = 1 - w_1, c_j = w_j - w_{j+1}, c_k = w_k, from the decay values w_j = f(j / N),
 *              j = 1..k: linear f(x) = 1 - x (every c_j = 1/N), cosine f(x) = (1 + cos(pi x)) / 2,
 *              1-sqrt f(x) = 1 - sqrt(x); or the values w_1..w_k given (wsm:0.9,0.5,0.1), each in
 *              [0, 1] and none above the one before.
 * The fold normalises (fold/schedule.h), so the weights here need not sum to 1.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace swavg {

enum class weight_recipe_kind { sma, wma, wma_step, ema, wsm };
enum class wsm_shape { linear, cosine, one_minus_sqrt, given };

struct weight_recipe {
  weight_recipe_kind kind = weight_recipe_kind::sma;
  double decay = 0.0;                   // ema:D
  wsm_shape shape = wsm_shape::linear;  // wsm
  std::vector<double> decay_values;     // wsm given: w_1..w_k
  std::string text;                     // as given ("wsm:cosine"), for messages and records
};

// The weight of each of `n` checkpoints (n >= 1) in fold order; `steps` holds each one's step
// (needed by wma-step only). Throws usage_error, naming `text`, when the recipe does not fit: wsm's
// given values not n - 1 or not a decay, wma-step with a step missing or all steps 0, a decay
// outside [0, 1].
std::vector<double> recipe_weights(const weight_recipe& r, size_t n, const std::vector<std::optional<int64_t>>& steps);

}  // namespace swavg
