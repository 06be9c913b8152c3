// decimal(): doubles in messages as text that reads back as the same double; parse_decimal(): the
// double a whole text spells.
#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
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

TEST_CASE("parse_decimal takes the whole text or nothing", "[decimal]") {
  CHECK(parse_decimal("0.5") == 0.5);
  CHECK(parse_decimal("1e-3") == 1e-3);
  CHECK(parse_decimal(decimal(0.1 + 0.2)) == 0.1 + 0.2);
  CHECK(std::isinf(*parse_decimal("inf")));
  CHECK(std::isnan(*parse_decimal("nan")));
  CHECK(parse_decimal("1.7976931348623157e308") == DBL_MAX);  // the largest double
  CHECK(std::isinf(*parse_decimal("1.8e308")));  // past it: strtod's inf (the callers' range checks refuse it)
  for (const char* bad : {"", " 1", "1 ", "1,2", "x", "0.5.ckpt", "1e", "--1"}) {
    INFO("'" << bad << "'");
    CHECK_FALSE(parse_decimal(bad));
  }
}
