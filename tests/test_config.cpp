// What a fold may be asked: validate_config's bounds at their edges.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <limits>

#include "fold/config.h"
#include "util/error.h"

using namespace swavg;

TEST_CASE("config: the last valid values pass, the first invalid ones fail", "[config]") {
  struct edge {
    const char* what;
    std::function<void(fold_config&)> set;
    size_t inputs;
    bool resuming;
    const char* error;  // nullptr: valid
  };
  const double below_zero = -std::numeric_limits<double>::denorm_min();
  const double above_one = std::nextafter(1.0, 2.0);
  auto ema = [](double d) {
    return [d](fold_config& c) {
      c.mode = fold_mode::ema;
      c.decay = d;
    };
  };
  auto weighted = [](std::vector<double> w) {
    return [w](fold_config& c) {
      c.mode = fold_mode::weighted;
      c.weights = w;
    };
  };
  auto power = [](double g) {
    return [g](fold_config& c) {
      c.mode = fold_mode::ema;
      c.warmup = warmup_kind::power;
      c.inv_gamma = g;
    };
  };
  const std::vector<edge> edges = {
      {"decay 0", ema(0.0), 2, false, nullptr},
      {"decay 1", ema(1.0), 2, false, nullptr},
      {"decay just below 0", ema(below_zero), 2, false, "--decay: expected a value in [0, 1]"},
      {"decay just above 1", ema(above_one), 2, false, "--decay: expected a value in [0, 1]"},
      {"decay NaN", ema(std::nan("")), 2, false, "--decay"},
      {"a decay outside [0, 1] is fine for swa, which has none", [](fold_config& c) { c.decay = 2.0; }, 2, false,
       nullptr},
      {"one weight per input", weighted({1, 2}), 2, false, nullptr},
      {"one weight too few", weighted({1}), 2, false, "--weights: 1 weights for 2 inputs"},
      {"one weight too many", weighted({1, 2, 3}), 2, false, "--weights: 3 weights for 2 inputs"},
      {"a zero weight", weighted({0, 1}), 2, false, nullptr},
      {"a weight just below 0", weighted({below_zero, 1}), 2, false, "weights must be finite and >= 0"},
      {"an infinite weight", weighted({INFINITY, 1}), 2, false, "weights must be finite and >= 0"},
      {"weights summing to the least positive double", weighted({0, std::numeric_limits<double>::denorm_min()}), 2,
       false, nullptr},
      {"weights summing to 0", weighted({0, 0}), 2, false, "--weights: the weights sum to 0"},
      {"weights with --resume", weighted({1, 1}), 2, true, "--resume works with equal weights"},
      {"inv_gamma just above 0", power(std::numeric_limits<double>::denorm_min()), 2, false, nullptr},
      {"inv_gamma 0", power(0.0), 2, false, "--inv-gamma: expected a positive value"},
      {"a rule's decay with ema",
       [](fold_config& c) {
         c.mode = fold_mode::ema;
         c.rules.push_back(tensor_rule{"x", compile_pattern("x", "t"), tensor_action::average, 0.5});
       },
       2, false, nullptr},
      {"a rule's decay with swa",
       [](fold_config& c) {
         c.rules.push_back(tensor_rule{"x", compile_pattern("x", "t"), tensor_action::average, 0.5});
       },
       2, false, "--rules: the rule for 'x' sets a decay"},
  };
  for (const auto& e : edges) {
    INFO(e.what);
    fold_config c;
    e.set(c);
    if (e.error == nullptr)
      CHECK_NOTHROW(validate_config(c, e.inputs, e.resuming));
    else
      CHECK_THROWS_WITH(validate_config(c, e.inputs, e.resuming), Catch::Contains(e.error));
  }
}

TEST_CASE("config: names as the command line and metadata spell them", "[config]") {
  CHECK(std::string(mode_name(fold_mode::weighted)) == "weighted");
  CHECK(std::string(warmup_name(warmup_kind::torch_ema)) == "torch_ema");
  CHECK(std::string(layout_name(output_layout::averaged_model)) == "averaged-model");
  CHECK(decimal(0.999) == "0.999");
  CHECK(decimal(1.0 - 0.9) == "0.099999999999999978");
}
