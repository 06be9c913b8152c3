// Post-hoc EMA math (fold/phema.h): gamma roots, profile inner products, the solve, the bounds and
// the snapshot names.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <string>
#include <vector>

#include "fold/phema.h"
#include "util/error.h"

using namespace swavg;

namespace {

double cubic_residual(double g, double s) {
  const double t = 1.0 / (s * s);
  const double terms = std::fabs(g * g * g) + 7 * g * g + std::fabs((16 - t) * g) + std::fabs(12 - t);
  return std::fabs(((g + 7) * g + (16 - t)) * g + (12 - t)) / terms;
}

// Midpoint rule on [0, min(ta, tb)] with n panels (both profiles are smooth there).
double integrate(double ta, double ga, double tb, double gb, int n) {
  const double end = std::min(ta, tb);
  const double h = end / n;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    const double tau = (i + 0.5) * h;
    sum += (ga + 1) * std::pow(tau, ga) / std::pow(ta, ga + 1) * (gb + 1) * std::pow(tau, gb) / std::pow(tb, gb + 1);
  }
  return sum * h;
}

}  // namespace

TEST_CASE("gamma is the cubic's largest real root", "[phema]") {
  // phema.py's std_to_exp (np.roots([1, 7, 16 - s^-2, 12 - s^-2]).real.max(), numpy 1.24); the
  // paper rounds them to 16.97 and 6.94.
  CHECK(sigma_rel_to_gamma(0.05) == Approx(16.972198602303447).epsilon(1e-14));
  CHECK(sigma_rel_to_gamma(0.10) == Approx(6.937203937601809).epsilon(1e-14));
  for (double s : {1e-6, 1e-3, 0.01, 0.05, 0.07, 0.1, 0.2, 0.27, std::nextafter(0.28, 0.0)}) {
    const double g = sigma_rel_to_gamma(s);
    CAPTURE(s, g);
    CHECK(g > 0);
    CHECK(cubic_residual(g, s) < 8 * DBL_EPSILON);
    CHECK(gamma_to_sigma_rel(g) == Approx(s).epsilon(1e-13));
  }
}

TEST_CASE("sigma_rel bounds", "[phema]") {
  const std::vector<double> bad = {0.28, 0.3, 0.0, -0.1, NAN, INFINITY, -INFINITY};
  for (double s : bad) {
    CAPTURE(s);
    CHECK_THROWS_AS(sigma_rel_to_gamma(s), usage_error);
  }
  CHECK_NOTHROW(sigma_rel_to_gamma(std::nextafter(0.28, 0.0)));
  CHECK_NOTHROW(sigma_rel_to_gamma(DBL_MIN));
}

TEST_CASE("profile inner products equal the integral", "[phema]") {
  struct pair_case {
    double ta, ga, tb, gb;
  };
  const std::vector<pair_case> cases = {{100, 6.94, 100, 6.94}, {50, 16.97, 100, 6.94}, {100, 16.97, 50, 6.94},
                                        {3, 2.0, 7, 0.5},       {7, 0.5, 3, 2.0},       {1, 0.1, 1, 30.0}};
  for (const auto& c : cases) {
    CAPTURE(c.ta, c.ga, c.tb, c.gb);
    CHECK(profile_inner(c.ta, c.ga, c.tb, c.gb) == Approx(integrate(c.ta, c.ga, c.tb, c.gb, 200000)).epsilon(1e-7));
    CHECK(profile_inner(c.ta, c.ga, c.tb, c.gb) == Approx(profile_inner(c.tb, c.gb, c.ta, c.ga)).epsilon(1e-14));
  }
}

TEST_CASE("LU with partial pivoting solves a hand case", "[phema]") {
  // a[0][0] = 0 needs the row swap; x = (1, 2, 3).
  const std::vector<double> a = {0, 2, 1, 1, 1, 1, 2, 1, 3};
  const std::vector<double> b = {2 * 2 + 3, 1 + 2 + 3, 2 + 2 + 9};
  const auto x = solve_linear(a, b, 3);
  CHECK(x[0] == Approx(1).epsilon(1e-15));
  CHECK(x[1] == Approx(2).epsilon(1e-15));
  CHECK(x[2] == Approx(3).epsilon(1e-15));
  CHECK_THROWS_AS(solve_linear({1, 2, 2, 4}, {1, 2}, 2), usage_error);
  // The threshold, n * DBL_EPSILON * column scale = 2 * 2^-52 * 2 = 2^-50: the last pivot is 2^-51
  // (refused), 2^-50 (refused: at the bound), 2^-49 (solved).
  CHECK_THROWS_AS(solve_linear({1, 2, 1, 2 + std::ldexp(1.0, -51)}, {1, 2}, 2), usage_error);
  CHECK_THROWS_AS(solve_linear({1, 2, 1, 2 + std::ldexp(1.0, -50)}, {1, 2}, 2), usage_error);
  CHECK_NOTHROW(solve_linear({1, 2, 1, 2 + std::ldexp(1.0, -49)}, {1, 2}, 2));
  CHECK_THROWS_AS(solve_linear({1, NAN, 1, 2}, {1, 2}, 2), usage_error);
}

TEST_CASE("an ill-conditioned real schedule is solved (EDM2-XS: 268 snapshots x 2 sigmas)", "[phema]") {
  // EDM2's img512-xs run: 2147 Mimg, snapshots every 8 Mimg, sigma_rel 0.05 and 0.10 (cond ~5.6e8
  // in numpy; its smallest pivot is 4.7e-6 of its column, far above the refusal threshold).
  std::vector<ema_profile> snaps;
  for (double s : {0.05, 0.10})
    for (int k = 1; k <= 268; ++k) snaps.push_back({8.0 * k, s, sigma_rel_to_gamma(s)});
  const auto sol = solve_phema(snaps, 0.07, 8.0 * 268);
  double total = 0;
  for (double x : sol.coefficients) total += x;
  CHECK(total == Approx(1.0).epsilon(1e-12));
}

TEST_CASE("solve_phema: reproduces a snapshot's own profile, normalised", "[phema]") {
  std::vector<ema_profile> snaps;
  for (double t : {10.0, 20.0, 30.0, 40.0})
    for (double s : {0.05, 0.10}) snaps.push_back({t, s, sigma_rel_to_gamma(s)});
  const auto sol = solve_phema(snaps, 0.10, 40.0);
  REQUIRE(sol.used.size() == snaps.size());
  double total = 0;
  for (double x : sol.coefficients) total += x;
  CHECK(total == Approx(1.0).epsilon(1e-14));
  // The target is snapshot 7's own profile: x = e_7.
  for (size_t i = 0; i < sol.coefficients.size(); ++i)
    CHECK(sol.coefficients[i] == Approx(i == 7 ? 1.0 : 0.0).margin(1e-6));

  // A profile outside the snapshots' span: least squares leaves a sum off 1, normalised back to it.
  const auto other = solve_phema(snaps, 0.2, 40.0);
  double sum = 0;
  for (double x : other.coefficients) sum += x;
  CHECK(sum == Approx(1.0).epsilon(1e-14));
  const auto raw = solve_linear(
      [&] {
        std::vector<double> a;
        for (const auto& p : snaps)
          for (const auto& q : snaps) a.push_back(profile_inner(p.t, p.gamma, q.t, q.gamma));
        return a;
      }(),
      [&] {
        std::vector<double> b;
        for (const auto& p : snaps) b.push_back(profile_inner(p.t, p.gamma, 40.0, sigma_rel_to_gamma(0.2)));
        return b;
      }(),
      snaps.size());
  double raw_sum = 0;
  for (double x : raw) raw_sum += x;
  CHECK(std::fabs(raw_sum - 1.0) > 1e-6);
  for (size_t i = 0; i < raw.size(); ++i) CHECK(other.coefficients[i] == Approx(raw[i] / raw_sum).epsilon(1e-13));

  const auto early = solve_phema(snaps, 0.07, 25.0);
  CHECK(early.used == std::vector<size_t>{0, 1, 2, 3});
  CHECK(early.at == 25.0);
}

TEST_CASE("solve_phema refuses what it cannot solve", "[phema]") {
  const double g5 = sigma_rel_to_gamma(0.05), g10 = sigma_rel_to_gamma(0.10);
  const std::vector<ema_profile> two = {{10, 0.05, g5}, {10, 0.10, g10}};
  CHECK_NOTHROW(solve_phema(two, std::nextafter(0.28, 0.0), 10));
  CHECK_THROWS_AS(solve_phema(two, 0.28, 10), usage_error);
  CHECK_THROWS_AS(solve_phema(two, 0.0, 10), usage_error);
  CHECK_THROWS_AS(solve_phema(two, 0.1, std::nextafter(10.0, 0.0)), usage_error);  // before every snapshot
  CHECK_NOTHROW(solve_phema(two, 0.1, 10.0));
  CHECK_THROWS_AS(solve_phema({{10, 0.05, g5}}, 0.1, 10), usage_error);                  // one profile
  CHECK_THROWS_AS(solve_phema({{10, 0.05, g5}, {10, 0.05, g5}}, 0.1, 10), usage_error);  // a duplicate
  CHECK_THROWS_AS(solve_phema({{10, 0.05, g5}, {20, 0.05, g5}, {10, 0.05, g5}}, 0.1, 20), usage_error);
  CHECK_THROWS_AS(solve_phema(two, 0.1, NAN), usage_error);
}

TEST_CASE("snapshot and checkpoint names", "[phema]") {
  struct named {
    std::string path;
    double t, sigma;
  };
  const std::vector<named> good = {{"snap-0004096-0.050.pt", 4096, 0.05},
                                   {"/runs/a/network-snapshot-0000512-0.100.pkl", 512, 0.1},
                                   {"phema-12-0.1.safetensors", 12, 0.1},
                                   {"snap-0004096-0.050/", 4096, 0.05},
                                   {"snap-0004096-0.050", 4096, 0.05}};
  for (const auto& g : good) {
    CAPTURE(g.path);
    const auto n = parse_snapshot_name(g.path);
    REQUIRE(n);
    CHECK(n->t == g.t);
    CHECK(n->sigma_rel == g.sigma);
  }
  for (const std::string bad : {"snap.pt", "snap-0004096.pt", "snap-00a4-0.050.pt", "snap-0004096-0.0x0.pt",
                                "-0.050.pt", "snap-0004096-.pt", "snap-1.5-0.050.pt"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_snapshot_name(bad));
  }
  CHECK(parse_checkpoint_time("ckpt-0004096.pt") == 4096.0);
  CHECK(parse_checkpoint_time("runs/step_100.safetensors") == 100.0);
  CHECK(parse_checkpoint_time("step_100_ema.pt") == 100.0);
  CHECK(parse_checkpoint_time("run_2-step_100/") == 100.0);
  CHECK_FALSE(parse_checkpoint_time("ckpt.pt"));
  CHECK_FALSE(parse_checkpoint_time("ckpt100.pt"));
  CHECK_FALSE(parse_checkpoint_time("ckpt-10a.pt"));
}

TEST_CASE("the condition estimate: exact where it can be, numpy's where it matters", "[phema]") {
  // diag(1, 2^-40): cond_1 = 2^40 exactly, and Hager's method is exact for diagonal matrices.
  CHECK(estimate_condition({1, 0, 0, std::ldexp(1.0, -40)}, 2) == std::ldexp(1.0, 40));
  CHECK(estimate_condition({1, 0, 0, 1}, 2) == 1);
  // Hilbert matrices: cond_1 = 748 (3 x 3) and 28375 (4 x 4), numpy.linalg.cond(H, 1).
  auto hilbert = [](size_t n) {
    std::vector<double> h(n * n);
    for (size_t i = 0; i < n; ++i)
      for (size_t j = 0; j < n; ++j) h[i * n + j] = 1.0 / static_cast<double>(i + j + 1);
    return h;
  };
  CHECK(estimate_condition(hilbert(3), 3) == Approx(748).epsilon(1e-9));
  CHECK(estimate_condition(hilbert(4), 4) == Approx(28375).epsilon(1e-9));
  // Not symmetric, with row swaps (A^-T is used as well as A^-1): numpy.linalg.cond(A, 1).
  CHECK(estimate_condition({0, 2, 1, 1, 1, 1, 2, 1, 3}, 3) == Approx(18.333333333333336).epsilon(1e-12));
  CHECK(estimate_condition({1, 10, 0, 0, 0, 1, 10, 0, 0, 0, 1, 10, 3, 0, 0, 1}, 4) ==
        Approx(4.0750250083361115).epsilon(1e-12));
  CHECK_THROWS_AS(estimate_condition({1, 2, 2, 4}, 2), usage_error);
}

TEST_CASE("solve_phema: the condition estimate of its Gram matrix, each side of the bound", "[phema]") {
  CHECK(kMaxPhemaCondition == 1e10);
  CHECK_FALSE(phema_ill_conditioned(1e10));
  CHECK(phema_ill_conditioned(std::nextafter(1e10, INFINITY)));
  CHECK(phema_ill_conditioned(NAN));
  CHECK_FALSE(phema_ill_conditioned(1));
  // numpy.linalg.cond(A, 1) of the Gram matrices: EDM2-XS's schedule (268 snapshots x sigma_rel 0.05
  // and 0.10 every 8 Mimg) 8.31662e8, below the bound; both sigma_rels at each of 150 consecutive
  // steps from t = 1000, 2.47406e10, above it. The estimate is a lower bound, within a factor 3.
  std::vector<ema_profile> xs, steps;
  for (double s : {0.05, 0.10}) {
    for (int k = 1; k <= 268; ++k) xs.push_back({8.0 * k, s, sigma_rel_to_gamma(s)});
    for (int t = 1000; t < 1150; ++t) steps.push_back({static_cast<double>(t), s, sigma_rel_to_gamma(s)});
  }
  const double edm2 = solve_phema(xs, 0.07, 8.0 * 268).condition;
  CHECK(edm2 <= 8.31662e8 * 1.0001);
  CHECK(edm2 >= 8.31662e8 / 3);
  CHECK_FALSE(phema_ill_conditioned(edm2));
  const double consecutive = solve_phema(steps, 0.07, 1149).condition;
  CHECK(consecutive <= 2.47406e10 * 1.0001);
  CHECK(consecutive >= 2.47406e10 / 3);
  CHECK(phema_ill_conditioned(consecutive));
}
