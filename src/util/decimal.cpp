/*
 * decimal(): a double as the shortest text that reads back as the same double, for messages;
 * parse_decimal(): the double a whole text spells.
 */
#include "util/decimal.h"

#include <fmt/format.h>

#include <cctype>
#include <cstdlib>

namespace swavg {

std::string decimal(double v) { return fmt::format("{}", v); }

std::optional<double> parse_decimal(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return std::nullopt;
  char* stop = nullptr;
  const double v = std::strtod(text.c_str(), &stop);
  if (stop != text.c_str() + text.size()) return std::nullopt;
  return v;
}

}  // namespace swavg
