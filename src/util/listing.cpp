#include "util/listing.h"

#include <fmt/format.h>

namespace swavg {

std::string listed_lines(const std::vector<std::string>& items, size_t max, const std::string& indent) {
  std::string text;
  for (size_t i = 0; i < items.size() && i < max; ++i) text += "\n" + indent + items[i];
  if (items.size() > max) text += fmt::format("\n{}... ({} in all)", indent, items.size());
  return text;
}

}  // namespace swavg
