/*
 * Doubles in messages as the user typed them: the shortest text that reads back as the same double
 * (fmt's `{}`), so that a message shows the value swavg compared, exactly, and `--min-decay 0.9999`
 * is echoed as 0.9999, not as 0.99990000000000001. And doubles read from text swavg is given (a
 * --decay, a --weights list, a metric table's cell): the whole text a number, or none.
 */
#pragma once

#include <optional>
#include <string>

namespace swavg {

// "0.999", "0.30000000000000004", "1e+300": the shortest text that reads back as `v`.
std::string decimal(double v);

// The number `text` spells, all of it (strtod's syntax: "0.5", "1e-3", "inf", "nan"), or nullopt for
// text that is empty, starts with a space or holds anything after the number.
std::optional<double> parse_decimal(const std::string& text);

}  // namespace swavg
