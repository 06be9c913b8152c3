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
  auto exponent = [](double p) {
    return [p](fold_config& c) {
      c.mode = fold_mode::ema;
      c.warmup = warmup_kind::power;
      c.power = p;
    };
  };
  auto min_decay = [](double m) {
    return [m](fold_config& c) {
      c.mode = fold_mode::ema;
      c.warmup = warmup_kind::power;
      c.decay = 0.9;
      c.min_decay = m;
    };
  };
  auto rule_decay = [](fold_mode m, double d) {
    return [m, d](fold_config& c) {
      c.mode = m;
      c.rules.push_back(tensor_rule{"x", compile_pattern("x", "t"), tensor_action::average, d});
    };
  };
  const double tiny = std::numeric_limits<double>::denorm_min();
  const double huge = std::numeric_limits<double>::max();
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
      {"weights summing to the largest double", weighted({huge / 2, huge / 2}), 2, false, nullptr},
      {"weights summing past the largest double", weighted({huge, huge / 1e15}), 2, false,
       "--weights: the weights sum to more than"},
      {"a NaN weight", weighted({std::nan(""), 1}), 2, false, "weights must be finite and >= 0"},
      {"inv_gamma just above 0", power(tiny), 2, false, nullptr},
      {"inv_gamma the largest double", power(huge), 2, false, nullptr},
      {"inv_gamma 0", power(0.0), 2, false, "--inv-gamma: expected a finite value > 0, got 0"},
      {"inv_gamma infinite", power(INFINITY), 2, false, "--inv-gamma: expected a finite value > 0, got inf"},
      {"inv_gamma NaN", power(std::nan("")), 2, false, "--inv-gamma: expected a finite value > 0, got nan"},
      {"inv_gamma checked for ema without the power warmup too",
       [](fold_config& c) {
         c.mode = fold_mode::ema;
         c.inv_gamma = -1;
       },
       2, false, "--inv-gamma"},
      {"power just above 0", exponent(tiny), 2, false, nullptr},
      {"power the largest double", exponent(huge), 2, false, nullptr},
      {"power 0", exponent(0.0), 2, false, "--power: expected a finite value > 0, got 0"},
      {"power NaN (a decay of 0 before)", exponent(std::nan("")), 2, false, "--power: expected a finite value > 0"},
      {"power infinite", exponent(INFINITY), 2, false, "--power"},
      {"min_decay 0", min_decay(0.0), 2, false, nullptr},
      {"min_decay equal to the decay", min_decay(0.9), 2, false, nullptr},
      {"min_decay just above the decay", min_decay(std::nextafter(0.9, 1.0)), 2, false,
       "--min-decay: expected a value in [0, --decay] = [0, 0.9], got 0.9000000000000001"},
      {"min_decay 9999: did you mean", min_decay(9999), 2, false,
       "--min-decay: expected a value in [0, --decay] = [0, 0.9], got 9999 (did you mean 0.9999?)"},
      {"decay 999: did you mean", ema(999), 2, false,
       "--decay: expected a value in [0, 1], got 999 (did you mean 0.999?)"},
      {"decay 99.9: the same digits", ema(99.9), 2, false, "got 99.9 (did you mean 0.999?)"},
      {"decay 5: 0.5, the lowest reading offered", ema(5), 2, false, "got 5 (did you mean 0.5?)"},
      {"decay -0.99: the sign dropped", ema(-0.99), 2, false, "got -0.99 (did you mean 0.99?)"},
      {"min_decay 1.5 (extrapolated before)", min_decay(1.5), 2, false,
       "--min-decay: expected a value in [0, --decay]"},
      {"min_decay just below 0", min_decay(below_zero), 2, false, "--min-decay"},
      {"min_decay NaN", min_decay(std::nan("")), 2, false, "--min-decay"},
      {"decay infinite", ema(INFINITY), 2, false, "--decay: expected a value in [0, 1], got inf"},
      {"a rule's decay with ema", rule_decay(fold_mode::ema, 0.5), 2, false, nullptr},
      {"a rule's decay of 1 with ema", rule_decay(fold_mode::ema, 1.0), 2, false, nullptr},
      {"a rule's decay just above 1", rule_decay(fold_mode::ema, above_one), 2, false,
       "--rules: the rule for 'x' has decay 1.0000000000000002, expected a value in [0, 1]"},
      {"a rule's decay with swa", rule_decay(fold_mode::swa, 0.5), 2, false, "--rules: the rule for 'x' sets a decay"},
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
}

TEST_CASE("validate_config: 'did you mean' only for a decay whose reading is from 0.5 up to 1", "[config]") {
  const auto message = [](double decay) {
    fold_config c;
    c.mode = fold_mode::ema;
    c.decay = decay;
    try {
      validate_config(c, 2, false);
    } catch (const usage_error& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK(message(4.9) == "--decay: expected a value in [0, 1], got 4.9");  // 0.49: below 0.5
  CHECK(message(1.5) == "--decay: expected a value in [0, 1], got 1.5");  // 0.15
  CHECK(message(1e300) == "--decay: expected a value in [0, 1], got 1e+300");
  CHECK(message(-0.49) == "--decay: expected a value in [0, 1], got -0.49");
  CHECK(message(-1.5) == "--decay: expected a value in [0, 1], got -1.5");
  CHECK(message(9990) == "--decay: expected a value in [0, 1], got 9990 (did you mean 0.999?)");
}
