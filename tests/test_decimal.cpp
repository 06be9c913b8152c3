// decimal(): doubles in messages as text that reads back as the same double.
#include <catch2/catch.hpp>

#include <cfloat>
#include <string>

#include "util/decimal.h"

using namespace swavg;

TEST_CASE("decimal: a double's shortest text, exactly", "[decimal]") {
  CHECK(decimal(0.999) == "0.999");
  CHECK(decimal(0.9999) == "0.9999");  // not 0.99990000000000001
  CHECK(decimal(1.0 - 0.9) == "0.09999999999999998");
  CHECK(decimal(0.1 + 0.2) == "0.30000000000000004");
  CHECK(decimal(999) == "999");
  for (const double v : {0.1, 1.0 / 3.0, 0.99900000000000011, DBL_MAX, DBL_MIN, -0.0})
    CHECK(std::stod(decimal(v)) == v);
}
