// The named weightings of --weights (fold/weight_recipes.h), from their formulas, and each refusal.
// tests/cli/test_recipes.py checks the same against Python's own computation and the fold's output.
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "fold/weight_recipes.h"
#include "util/error.h"

using namespace swavg;

namespace {

weight_recipe recipe(weight_recipe_kind k, const std::string& text) {
  weight_recipe r;
  r.kind = k;
  r.text = text;
  return r;
}

std::vector<double> normalised(std::vector<double> w) {
  double sum = 0;
  for (double x : w) sum += x;
  for (double& x : w) x /= sum;
  return w;
}

}  // namespace

TEST_CASE("sma, wma and wma-step", "[weight_recipes]") {
  CHECK(recipe_weights(recipe(weight_recipe_kind::sma, "sma"), 3, {}) == std::vector<double>{1, 1, 1});
  CHECK(recipe_weights(recipe(weight_recipe_kind::wma, "wma"), 4, {}) == std::vector<double>{1, 2, 3, 4});
  CHECK(recipe_weights(recipe(weight_recipe_kind::wma_step, "wma-step"), 2, {100, 300}) ==
        std::vector<double>{100, 300});
  CHECK_THROWS_WITH(recipe_weights(recipe(weight_recipe_kind::wma_step, "wma-step"), 2, {100, std::nullopt}),
                    Catch::Contains("checkpoint 2 has no step"));
}

TEST_CASE("ema:D gives what a running lerp gives each checkpoint", "[weight_recipes]") {
  for (const double d : {0.0, 0.5, 0.9, 1.0}) {
    INFO("decay " << d);
    weight_recipe r = recipe(weight_recipe_kind::ema, "ema");
    r.decay = d;
    const std::vector<double> w = recipe_weights(r, 4, {});
    std::vector<double> lerp = {1, 0, 0, 0};  // each checkpoint's share of avg = avg.lerp(x, 1 - d)
    for (size_t k = 1; k < 4; ++k) {
      for (size_t i = 0; i < k; ++i) lerp[i] *= d;
      lerp[k] = 1 - d;
    }
    for (size_t i = 0; i < 4; ++i) CHECK(w[i] == Approx(lerp[i]).margin(1e-15));
  }
  weight_recipe bad = recipe(weight_recipe_kind::ema, "ema:1.5");
  bad.decay = std::nextafter(1.0, 2.0);  // the first invalid
  CHECK_THROWS_WITH(recipe_weights(bad, 2, {}), Catch::Contains("the decay must be in [0, 1]"));
  bad.decay = -std::numeric_limits<double>::denorm_min();  // the first invalid below 0 (0 itself is valid, above)
  CHECK_THROWS_WITH(recipe_weights(bad, 2, {}), Catch::Contains("the decay must be in [0, 1]"));
}

TEST_CASE("wsm from a decay shape or given values", "[weight_recipes]") {
  weight_recipe r = recipe(weight_recipe_kind::wsm, "wsm:linear");
  for (size_t n = 1; n <= 6; ++n) {
    INFO("n " << n);
    for (double w : normalised(recipe_weights(r, n, {}))) CHECK(w == Approx(1.0 / n));
  }
  r.shape = wsm_shape::cosine;  // w_1 = (1 + cos(pi/3))/2 = 0.75, w_2 = 0.25: c = 0.25, 0.5, 0.25
  const std::vector<double> cosine = recipe_weights(r, 3, {});
  CHECK(cosine[0] == Approx(0.25));
  CHECK(cosine[1] == Approx(0.5));
  CHECK(cosine[2] == Approx(0.25));
  r.shape = wsm_shape::one_minus_sqrt;  // w_1 = 1 - sqrt(1/2): c_0 = sqrt(1/2), c_1 = 1 - sqrt(1/2)
  const std::vector<double> sq = recipe_weights(r, 2, {});
  CHECK(sq[0] == Approx(std::sqrt(0.5)));
  CHECK(sq[1] == Approx(1 - std::sqrt(0.5)));
  r.shape = wsm_shape::given;
  r.text = "wsm:0.8,0.8,0.2";
  r.decay_values = {0.8, 0.8, 0.2};  // equal neighbours: the last valid
  const std::vector<double> given = recipe_weights(r, 4, {});
  CHECK(given[0] == Approx(0.2));
  CHECK(given[1] == Approx(0.0).margin(1e-15));
  CHECK(given[2] == Approx(0.6));
  CHECK(given[3] == Approx(0.2));
  CHECK_THROWS_WITH(recipe_weights(r, 3, {}),
                    Catch::Contains("3 decay values for 3 checkpoints") && Catch::Contains("so give 2"));
  r.decay_values = {0.8, std::nextafter(0.8, 1.0), 0.2};  // the first invalid: rises
  CHECK_THROWS_WITH(recipe_weights(r, 4, {}), Catch::Contains("value 2 is"));
  r.decay_values = {std::nextafter(1.0, 2.0), 0.5, 0.2};
  CHECK_THROWS_WITH(recipe_weights(r, 4, {}), Catch::Contains("value 1 is"));
  r.decay_values = {0.5, 0.2, -0.0};
  CHECK(recipe_weights(r, 4, {}).size() == 4);
  r.decay_values = {0.5, 0.2, -1e-300};
  CHECK_THROWS_WITH(recipe_weights(r, 4, {}), Catch::Contains("value 3 is"));
}
