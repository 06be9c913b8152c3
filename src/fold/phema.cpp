#include "fold/phema.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <utility>

#include "fold/config.h"
#include "util/error.h"

namespace swavg {
namespace {

constexpr int kMaxNewtonSteps = 200;

// f(g) = (g+2)^2 (g+3) - (g+1) s^-2, the cubic rearranged: negative at 0 for s < 1/sqrt(12),
// increasing past its root (f / (g+1) = s(g)^-2 - s^-2 is increasing on g >= 0).
double cubic(double g, double inv_s2) { return (g + 2) * (g + 2) * (g + 3) - (g + 1) * inv_s2; }
double cubic_slope(double g, double inv_s2) { return 3 * g * g + 14 * g + 16 - inv_s2; }

std::string file_name_of(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The name without an extension that starts with a letter ("snap-1-0.050.pt" -> "snap-1-0.050";
// "snap-1-0.050" stays, as its last dot is the sigma's).
std::string stem_of(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos || dot + 1 >= name.size() || !std::isalpha(static_cast<unsigned char>(name[dot + 1])))
    return name;
  return name.substr(0, dot);
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
}

bool is_decimal(const std::string& s) {
  const auto dot = s.find('.');
  if (dot == std::string::npos) return all_digits(s);
  return all_digits(s.substr(0, dot)) && all_digits(s.substr(dot + 1));
}

}  // namespace

double sigma_rel_to_gamma(double sigma_rel, const std::string& what) {
  if (!std::isfinite(sigma_rel) || sigma_rel <= 0.0 || sigma_rel >= kMaxSigmaRel)
    throw usage_error(fmt::format("{}: sigma_rel must be in (0, {}), found {}", what, kMaxSigmaRel, sigma_rel));
  const double inv_s2 = 1.0 / (sigma_rel * sigma_rel);
  double lo = 0.0;  // cubic(lo) < 0
  double hi = std::max(1.0, 2.0 / sigma_rel);
  while (cubic(hi, inv_s2) <= 0) hi *= 2;  // g ~ 1/s for small s: a step or two at most
  double g = 0.5 * (lo + hi);
  for (int step = 0; step < kMaxNewtonSteps; ++step) {
    const double f = cubic(g, inv_s2);
    if (f == 0) return g;
    (f < 0 ? lo : hi) = g;
    const double slope = cubic_slope(g, inv_s2);
    double next = slope > 0 ? g - f / slope : lo;
    if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);  // Newton left the bracket: bisect
    if (next == g || hi - lo <= 4 * DBL_EPSILON * hi) return next;
    g = next;
  }
  return g;
}

double gamma_to_sigma_rel(double gamma) { return std::sqrt((gamma + 1) / ((gamma + 2) * (gamma + 2) * (gamma + 3))); }

double profile_inner(double ta, double ga, double tb, double gb) {
  const double ratio = ta / tb;
  const double e = ta < tb ? gb : -ga;
  const double num = (ga + 1) * (gb + 1) * std::pow(ratio, e);
  const double den = (ga + gb + 1) * std::max(ta, tb);
  return num / den;
}

namespace {

// P A = L U with partial pivoting, in place in `a` (L's unit diagonal implied, its multipliers below
// U); pivot[k] is the row swapped with row k at step k, as LAPACK's getrf.
struct lu_factors {
  std::vector<double> a;
  std::vector<size_t> pivot;
  size_t n;

  lu_factors(std::vector<double> m, size_t size) : a(std::move(m)), pivot(size), n(size) {
    std::vector<double> scale(n, 0.0);
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < n; ++k) scale[k] = std::max(scale[k], std::fabs(a[i * n + k]));
    for (size_t k = 0; k < n; ++k) {
      size_t p = k;
      for (size_t i = k + 1; i < n; ++i)
        if (std::fabs(a[i * n + k]) > std::fabs(a[p * n + k])) p = i;
      const double pv = a[p * n + k];
      if (!std::isfinite(pv) || std::fabs(pv) <= static_cast<double>(n) * DBL_EPSILON * scale[k])
        throw usage_error(fmt::format(
            "the post-hoc EMA system is singular: pivot {} of {} is {} (column scale {}); two snapshots have "
            "(nearly) the same profile",
            k + 1, n, pv, scale[k]));
      pivot[k] = p;
      if (p != k)
        for (size_t j = 0; j < n; ++j) std::swap(a[k * n + j], a[p * n + j]);
      for (size_t i = k + 1; i < n; ++i) {
        const double l = a[i * n + k] / pv;
        a[i * n + k] = l;
        if (l == 0) continue;
        for (size_t j = k + 1; j < n; ++j) a[i * n + j] -= l * a[k * n + j];
      }
    }
  }

  // A^-1 b: the swaps, then L, then U (as getrs).
  std::vector<double> solve(std::vector<double> b) const {
    for (size_t k = 0; k < n; ++k)
      if (pivot[k] != k) std::swap(b[k], b[pivot[k]]);
    for (size_t k = 0; k < n; ++k)
      for (size_t i = k + 1; i < n; ++i) b[i] -= a[i * n + k] * b[k];
    for (size_t k = n; k-- > 0;) {
      double t = b[k];
      for (size_t j = k + 1; j < n; ++j) t -= a[k * n + j] * b[j];
      b[k] = t / a[k * n + k];
    }
    return b;
  }

  // A^-T b: U^T then L^T, then the swaps undone in reverse.
  std::vector<double> solve_transposed(std::vector<double> b) const {
    for (size_t k = 0; k < n; ++k) {
      double t = b[k];
      for (size_t j = 0; j < k; ++j) t -= a[j * n + k] * b[j];
      b[k] = t / a[k * n + k];
    }
    for (size_t k = n; k-- > 0;) {
      double t = b[k];
      for (size_t j = k + 1; j < n; ++j) t -= a[j * n + k] * b[j];
      b[k] = t;
    }
    for (size_t k = n; k-- > 0;)
      if (pivot[k] != k) std::swap(b[k], b[pivot[k]]);
    return b;
  }
};

double norm1(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::fabs(x);
  return s;
}

// ||A^-1||_1 from below, in a few solves: Hager's method with Higham's refinements (LAPACK's lacn2,
// as gecon uses it). Exact for diagonal matrices; within a small factor in practice.
double inverse_norm1_estimate(const lu_factors& f) {
  const size_t n = f.n;
  std::vector<double> x(n, 1.0 / static_cast<double>(n));
  double estimate = 0;
  std::optional<size_t> last;
  for (int step = 0; step < 5; ++step) {
    const std::vector<double> y = f.solve(x);
    const double e = norm1(y);
    if (step > 0 && e <= estimate) break;
    estimate = e;
    std::vector<double> sign(n);
    for (size_t i = 0; i < n; ++i) sign[i] = y[i] >= 0 ? 1.0 : -1.0;
    const std::vector<double> z = f.solve_transposed(sign);
    size_t j = 0;
    for (size_t i = 1; i < n; ++i)
      if (std::fabs(z[i]) > std::fabs(z[j])) j = i;
    double zx = 0;
    for (size_t i = 0; i < n; ++i) zx += z[i] * x[i];
    if (step > 0 && (last == j || std::fabs(z[j]) <= zx)) break;
    last = j;
    std::fill(x.begin(), x.end(), 0.0);
    x[j] = 1.0;
  }
  if (n > 1) {  // Higham's alternating vector catches what the steps above can miss
    std::vector<double> b(n);
    for (size_t i = 0; i < n; ++i)
      b[i] = (i % 2 ? -1.0 : 1.0) * (1.0 + static_cast<double>(i) / static_cast<double>(n - 1));
    estimate = std::max(estimate, 2 * norm1(f.solve(b)) / (3 * static_cast<double>(n)));
  }
  return estimate;
}

double matrix_norm1(const std::vector<double>& a, size_t n) {
  double best = 0;
  for (size_t k = 0; k < n; ++k) {
    double column = 0;
    for (size_t i = 0; i < n; ++i) column += std::fabs(a[i * n + k]);
    best = std::max(best, column);
  }
  return best;
}

}  // namespace

std::vector<double> solve_linear(std::vector<double> a, std::vector<double> b, size_t n) {
  return lu_factors(std::move(a), n).solve(std::move(b));
}

double estimate_condition(const std::vector<double>& a, size_t n) {
  return matrix_norm1(a, n) * inverse_norm1_estimate(lu_factors(a, n));
}

bool phema_ill_conditioned(double condition) { return !(condition <= kMaxPhemaCondition); }

phema_solution solve_phema(const std::vector<ema_profile>& snapshots, double target_sigma_rel, double at) {
  phema_solution s;
  s.gamma = sigma_rel_to_gamma(target_sigma_rel);
  if (!std::isfinite(at) || at <= 0) throw usage_error(fmt::format("--at: T must be finite and > 0, found {}", at));
  s.at = at;
  double first = INFINITY;
  for (size_t i = 0; i < snapshots.size(); ++i) {
    first = std::min(first, snapshots[i].t);
    if (snapshots[i].t <= at) s.used.push_back(i);
  }
  if (s.used.empty())
    throw usage_error(fmt::format("--at {} is before every snapshot (the first is at t = {})", at, first));
  for (size_t i = 0; i < s.used.size(); ++i)
    for (size_t j = i + 1; j < s.used.size(); ++j) {
      const ema_profile& a = snapshots[s.used[i]];
      const ema_profile& b = snapshots[s.used[j]];
      if (a.t == b.t && a.sigma_rel == b.sigma_rel)
        throw usage_error(
            fmt::format("snapshots {} and {} have the same profile (t = {}, sigma_rel = {}): the system "
                        "would be singular; pass each profile once",
                        s.used[i] + 1, s.used[j] + 1, a.t, a.sigma_rel));
    }
  const size_t n = s.used.size();
  if (n < 2)
    throw usage_error(
        fmt::format("post-hoc EMA needs at least two distinct snapshot profiles with t <= {}, found {}", at, n));
  std::vector<double> a(n * n), b(n);
  for (size_t i = 0; i < n; ++i) {
    const ema_profile& p = snapshots[s.used[i]];
    for (size_t j = 0; j < n; ++j) {
      const ema_profile& q = snapshots[s.used[j]];
      a[i * n + j] = profile_inner(p.t, p.gamma, q.t, q.gamma);
    }
    b[i] = profile_inner(p.t, p.gamma, at, s.gamma);
  }
  const lu_factors f(a, n);
  s.coefficients = f.solve(std::move(b));
  s.condition = matrix_norm1(a, n) * inverse_norm1_estimate(f);
  double total = 0;
  for (double x : s.coefficients) total += x;
  if (!std::isfinite(total) || total == 0)
    throw usage_error(fmt::format("the post-hoc EMA coefficients sum to {}: cannot normalise them", total));
  for (double& x : s.coefficients) x /= total;
  return s;
}

std::optional<snapshot_name> parse_snapshot_name(const std::string& path) {
  const std::string stem = stem_of(file_name_of(path));
  const auto last = stem.rfind('-');
  if (last == std::string::npos || last == 0) return std::nullopt;
  const auto before = stem.rfind('-', last - 1);
  if (before == std::string::npos) return std::nullopt;
  const std::string t = stem.substr(before + 1, last - before - 1);
  const std::string sigma = stem.substr(last + 1);
  if (!all_digits(t) || !is_decimal(sigma)) return std::nullopt;
  return snapshot_name{std::strtod(t.c_str(), nullptr), std::strtod(sigma.c_str(), nullptr)};
}

std::optional<double> parse_checkpoint_time(const std::string& path) {
  const std::string stem = stem_of(file_name_of(path));
  std::optional<double> t;
  for (size_t i = 1; i < stem.size(); ++i) {
    if ((stem[i - 1] != '-' && stem[i - 1] != '_') || !std::isdigit(static_cast<unsigned char>(stem[i]))) continue;
    size_t end = i;
    while (end < stem.size() && std::isdigit(static_cast<unsigned char>(stem[end]))) ++end;
    if (end == stem.size() || stem[end] == '-' || stem[end] == '_') t = std::strtod(stem.c_str() + i, nullptr);
    i = end;
  }
  return t;
}

}  // namespace swavg
