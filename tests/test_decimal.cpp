// decimal(): doubles in messages as text that reads back as the same double.
#include <catch2/catch.hpp>

#include <cfloat>
#include <string>

#include "util/decimal.h"

using namespace swavg;

TEST_CASE("decimal: a double's text, exactly", "[decimal]") {
  CHECK(decimal(0.999) == "0.999");
  CHECK(decimal(1.0 - 0.9) == "0.099999999999999978");
  for (const double v : {0.1, 1.0 / 3.0, 0.99900000000000011, DBL_MAX, DBL_MIN, -0.0})
    CHECK(std::stod(decimal(v)) == v);
}
