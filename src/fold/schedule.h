/*
 * The weight each checkpoint gets when it is folded into an average of k (k >= 1) checkpoints,
 * as the lerp weight w of `avg = avg.lerp(x, w)`:
 *   EMA       w = 1 - decay_k, with decay_k = decay (no warmup), min(decay, (1 + k) / (10 + k))
 *             (torch_ema), or 1 - (1 + k / inv_gamma) ** -power clamped to [min_decay, decay]
 *             (power, timm's schedule); a rule may replace decay for its tensors; or EDM2's
 *             power-function EMA, decay_k = (t_{k-1} / t_k)^(gamma + 1) over the inputs' times
 *   weighted  w = w_i / (w_1 + ... + w_i), a normalised running sum (model soups)
 * SWA needs no weight: its step divides by k + 1 (see native_kernels.h).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include <vector>

#include "fold/config.h"
#include "fold/plan.h"

namespace swavg {

// The decay used when folding a checkpoint into an average of n (n >= 1), for EMA.
double ema_decay_at(const fold_config& c, int64_t n, std::optional<double> rule_decay);

// The decay for folding input `input` into an average of n: the power-function EMA's beta
// (t_{input-1} / t_input)^(gamma + 1) when c.power_ema is set (config.h), else ema_decay_at. It is
// computed as EDM2's power_function_beta(t_next = t_k, t_delta = t_k - t_{k-1}), (1 - t_delta /
// t_next) ** (gamma + 1), so that checkpoints every step give EDM2's own betas bit for bit.
double ema_decay_for(const fold_config& c, std::optional<double> rule_decay, size_t input, int64_t n);

// The lerp weight for folding input `input` into an average of k checkpoints (EMA or weighted);
// weight_total carries the running sum of the weights folded so far (weighted mode).
double fold_weight(const fold_config& c, std::optional<double> rule_decay, size_t input, int64_t k,
                   double& weight_total);

// Weighted mode: each input's weight divided by their sum, in fold order (what --weights means);
// empty in the other modes.
std::vector<double> normalised_weights(const fold_config& c);

// The lerp weight of each of the tensor's sources in fold order (EMA and weighted folds), after a
// resumed average's p.resumed_count checkpoints; 0 for a source that starts the average (it is
// copied, not folded). Both fold paths take their weights from here.
std::vector<double> lerp_weights(const fold_config& c, const tensor_plan& p);

}  // namespace swavg
