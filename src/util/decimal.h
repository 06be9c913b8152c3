/*
 * Doubles in messages as the user typed them: the shortest text that reads back as the same double
 * (fmt's `{}`), so that a message shows the value swavg compared, exactly, and `--min-decay 0.9999`
 * is echoed as 0.9999, not as 0.99990000000000001.
 */
#pragma once

#include <string>

namespace swavg {

// "0.999", "0.30000000000000004", "1e+300": the shortest text that reads back as `v`.
std::string decimal(double v);

}  // namespace swavg
