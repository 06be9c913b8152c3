/*
 * Post-hoc EMA reconstruction (Karras et al., "Analyzing and Improving the Training Dynamics of
 * Diffusion Models", 2024; NVlabs/edm2 training/phema.py), the math alone, in float64.
 *
 * A power-function EMA of relative standard deviation sigma_rel has exponent gamma, the largest
 * real root of g^3 + 7g^2 + (16 - s^-2)g + (12 - s^-2) = 0 (unique on (0, inf) for s < 0.28), and
 * at training time t it averages the parameters with the profile p_{t,g}(tau) = (g+1) tau^g /
 * t^(g+1) on [0, t]. Snapshots of such EMAs, taken during training, are combined into any other
 * profile (t = T, sigma_rel) by least squares in L2: with A_ij = <p_i, p_j> and b_i = <p_i, p_T>,
 *   x = A^-1 b  (LU with partial pivoting, as LAPACK's gesv and numpy.linalg.solve),  x /= sum(x)
 * over the snapshots with t_i <= T, exactly as phema.py's solve_posthoc_coefficients.
 *
 * Also here: EDM2's snapshot names (`<anything>-<t>-<sigma_rel>.<ext>`) and the training time in a
 * checkpoint's name (`ckpt-0004096.pt`, `step_100.safetensors`), parsed without touching the file.
 */
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace swavg {

// sigma_rel must lie in (0, kMaxSigmaRel): at 1/sqrt(12) = 0.2887 gamma reaches 0 (a flat average
// from the start of training); EDM2 uses the same bound.
constexpr double kMaxSigmaRel = 0.28;

// gamma(sigma_rel), to within a few ulps (a safeguarded Newton iteration on the bracketed root).
// Throws usage_error, naming `what`, for sigma_rel not finite or outside (0, kMaxSigmaRel).
double sigma_rel_to_gamma(double sigma_rel, const std::string& what = "--sigma-rel");

// The profile's sigma_rel for exponent gamma: sqrt((g+1) / ((g+2)^2 (g+3))).
double gamma_to_sigma_rel(double gamma);

// <p_{ta,ga}, p_{tb,gb}> = integral of the product over [0, min(ta, tb)], as phema.py computes it.
double profile_inner(double ta, double ga, double tb, double gb);

struct ema_profile {
  double t = 0.0;  // training time, > 0
  double sigma_rel = 0.0;
  double gamma = 0.0;
};

// Solves a x = b for the n x n row-major matrix `a`: LU with partial pivoting. Throws usage_error
// when a pivot is not finite or |pivot| <= n * DBL_EPSILON * (the largest |a_ik| of its column):
// rounding alone could have made it, so the system is singular (duplicate profiles). Real runs
// pass far above that (EDM2-XS's 536 snapshot profiles: smallest relative pivot 4.7e-6).
std::vector<double> solve_linear(std::vector<double> a, std::vector<double> b, size_t n);

// An estimate (from below, usually within a factor of 3) of the 1-norm condition number
// ||A||_1 ||A^-1||_1 of the n x n row-major matrix `a`, in O(n^2) past its LU factors (Hager and
// Higham's method, LAPACK's gecon); exact for a diagonal matrix. Throws as solve_linear.
double estimate_condition(const std::vector<double>& a, size_t n);

// The condition estimate past which the post-hoc EMA solve is reported as ill-conditioned: its
// coefficients may then be off by up to ~cond x 2^-53 ~ 1e-6 relative, more than float32 resolves.
// EDM2's own schedule (two sigma_rels, a snapshot every 8 Mi images to 2 Gi) estimates 7.6e8; a
// snapshot at every step late in training passes it (300 steps at t ~ 10^9: ~3e10).
constexpr double kMaxPhemaCondition = 1e10;
// condition > kMaxPhemaCondition (or not a number).
bool phema_ill_conditioned(double condition);

struct phema_solution {
  double gamma = 0.0;                // of the target
  double at = 0.0;                   // T
  std::vector<size_t> used;          // indices into the snapshots, t_i <= T, in their order
  std::vector<double> coefficients;  // one per used snapshot, summing to 1
  double condition = 0.0;            // estimate_condition of the Gram matrix A solved
};

// The coefficients reconstructing the profile (at, target_sigma_rel) from `snapshots` (gamma
// filled in). Throws usage_error: target sigma outside (0, kMaxSigmaRel), `at` not finite and > 0,
// before every snapshot, two snapshots with the same profile, fewer than two distinct profiles
// with t_i <= at, or a singular system.
phema_solution solve_phema(const std::vector<ema_profile>& snapshots, double target_sigma_rel, double at);

// EDM2's snapshot name: the file or folder name (a trailing '/' ignored), without an extension
// that starts with a letter, ends in "-<t>-<sigma_rel>", t digits, sigma_rel a decimal number.
struct snapshot_name {
  double t;
  double sigma_rel;
};
std::optional<snapshot_name> parse_snapshot_name(const std::string& path);

// The training time of a checkpoint from its name: the last `-<digits>` or `_<digits>` group of the
// file name without its extension, delimited by `-`, `_` or its end ("ckpt-0004096.pt" -> 4096,
// "step_100_ema.safetensors" -> 100). nullopt when there is none.
std::optional<double> parse_checkpoint_time(const std::string& path);

}  // namespace swavg
