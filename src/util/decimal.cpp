/*
 * decimal(): a double as the shortest text that reads back as the same double, for messages.
 */
#include "util/decimal.h"

#include <fmt/format.h>

namespace swavg {

std::string decimal(double v) { return fmt::format("{}", v); }

}  // namespace swavg
