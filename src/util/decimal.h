/*
 * Doubles in messages, exactly: 17 significant digits (%.17g), which read back as the same double,
 * so that a message shows the value swavg compared, not a rounding of it.
 */
#pragma once

#include <string>

namespace swavg {

// "0.99900000000000011": doubles in messages, exactly.
std::string decimal(double v);

}  // namespace swavg
