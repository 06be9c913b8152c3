// The EMA decay schedules and the weights of weighted folds.
#include <catch2/catch.hpp>
#include <cmath>

#include "fold/schedule.h"
#include "util/error.h"

using namespace swavg;

TEST_CASE("EMA decay schedules", "[schedule]") {
  fold_config c;
  c.decay = 0.999;
  CHECK(ema_decay_at(c, 5, std::nullopt) == 0.999);
  CHECK(ema_decay_at(c, 5, 0.5) == 0.5);
  c.warmup = warmup_kind::torch_ema;
  CHECK(ema_decay_at(c, 1, std::nullopt) == 2.0 / 11.0);
  CHECK(ema_decay_at(c, 100000, std::nullopt) == 0.999);
  c.warmup = warmup_kind::power;
  c.inv_gamma = 1.0;
  c.power = 2.0 / 3.0;
  CHECK(ema_decay_at(c, 7, std::nullopt) == Approx(1.0 - std::pow(8.0, -2.0 / 3.0)));
  c.min_decay = 0.9;
  CHECK(ema_decay_at(c, 1, std::nullopt) == 0.9);
  CHECK(ema_decay_at(c, 1000000000, std::nullopt) == 0.999);
}

TEST_CASE("weighted folds normalise the running sum", "[schedule]") {
  fold_config c;
  c.mode = fold_mode::weighted;
  c.weights = {0.5, 0.25, 0.25};
  double total = c.weights[0];
  CHECK(fold_weight(c, std::nullopt, 1, 1, total) == 0.25 / 0.75);
  CHECK(fold_weight(c, std::nullopt, 2, 2, total) == 0.25);
  CHECK(total == 1.0);
  c.mode = fold_mode::ema;
  c.decay = 0.9;
  CHECK(fold_weight(c, std::nullopt, 1, 1, total) == 1.0 - 0.9);
  CHECK(fold_weight(c, 0.5, 1, 1, total) == 0.5);
}

TEST_CASE("power-function EMA decays from training times", "[schedule]") {
  fold_config c;
  c.mode = fold_mode::ema;
  c.power_ema = power_function_ema{0.1, 6.9, {1, 2, 5}, 0.0};
  double total = 0;
  CHECK(ema_decay_for(c, std::nullopt, 0, 0) == 0.0);  // t_0 = 0: the first is copied
  CHECK(ema_decay_for(c, std::nullopt, 1, 1) == std::pow(1.0 - 1.0 / 2.0, 7.9));
  CHECK(ema_decay_for(c, std::nullopt, 2, 2) == Approx(std::pow(2.0 / 5.0, 7.9)).epsilon(1e-15));
  CHECK(fold_weight(c, std::nullopt, 2, 2, total) == 1.0 - std::pow(1.0 - 3.0 / 5.0, 7.9));
  c.power_ema->start_time = 0.5;
  CHECK(ema_decay_for(c, std::nullopt, 0, 1) == std::pow(1.0 - 0.5 / 1.0, 7.9));
}

TEST_CASE("power-function EMA times are validated", "[schedule]") {
  fold_config c;
  c.mode = fold_mode::ema;
  c.power_ema = power_function_ema{0.1, 6.9, {1, 2, 5}, 0.0};
  CHECK_NOTHROW(validate_config(c, 3, false));
  CHECK_THROWS_AS(validate_config(c, 2, false), usage_error);
  for (std::vector<double> bad : std::vector<std::vector<double>>{{1, 1, 5}, {2, 1, 5}, {0, 1, 5}, {1, NAN, 5}}) {
    c.power_ema->times = bad;
    CHECK_THROWS_AS(validate_config(c, 3, false), usage_error);
  }
  c.power_ema->times = {1, 2, 5};
  c.power_ema->start_time = 1;  // resumed at t = 1: the next must come after it
  CHECK_THROWS_AS(validate_config(c, 3, true), usage_error);
  c.power_ema->start_time = std::nextafter(1.0, 0.0);
  CHECK_NOTHROW(validate_config(c, 3, true));
}

TEST_CASE("lerp_weights: each source's weight in fold order, after a resumed average", "[schedule]") {
  tensor_view v;
  tensor_plan p;
  p.sources = {{0, &v}, {2, &v}, {3, &v}};  // input 1 lacks the tensor (--allow-missing)
  fold_config c;
  c.mode = fold_mode::weighted;
  c.weights = {0.0, 5.0, 1.0, 3.0};
  // The first source starts the average; a zero weight before it makes the next weight exactly 1,
  // as torch's running normalisation does.
  CHECK(lerp_weights(c, p) == std::vector<double>{0.0, 1.0, 3.0 / 4.0});
  c.mode = fold_mode::ema;
  c.decay = 0.9;
  c.warmup = warmup_kind::torch_ema;
  CHECK(lerp_weights(c, p) == std::vector<double>{0.0, 1.0 - 2.0 / 11.0, 1.0 - 3.0 / 12.0});
  tensor_view resumed;
  p.resumed = &resumed;
  p.resumed_count = 4;  // every source folds, the first into an average of 4
  CHECK(lerp_weights(c, p) == std::vector<double>{1.0 - 5.0 / 14.0, 1.0 - 6.0 / 15.0, 1.0 - 7.0 / 16.0});
  p.rule_decay = 0.3;
  CHECK(lerp_weights(c, p) == std::vector<double>{1.0 - 0.3, 1.0 - 0.3, 1.0 - 0.3});
}
