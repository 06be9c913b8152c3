// The EMA decay schedules and the weights of weighted folds.
#include <catch2/catch.hpp>
#include <cmath>

#include "fold/schedule.h"

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
