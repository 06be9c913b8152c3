/*
 * decimal(): a double as text that reads back as the same double, for messages.
 */
#include "util/decimal.h"

#include <cstdio>

namespace swavg {

std::string decimal(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace swavg
