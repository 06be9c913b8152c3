#include "util/listing.h"

#include <fmt/format.h>

#include "util/printable.h"

namespace swavg {

std::string cut_text(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xc0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "...";
}

std::string quoted_list(const std::vector<std::string>& items, size_t max) {
  if (items.empty()) return "none";
  std::string text;
  for (size_t i = 0; i < items.size() && i < max; ++i) text += (i ? ", '" : "'") + printable(cut_text(items[i])) + "'";
  if (items.size() > max) text += fmt::format("{}... ({} in all)", max ? ", " : "", items.size());
  return text;
}

std::string listed_lines(const std::vector<std::string>& items, size_t max, const std::string& indent) {
  std::string text;
  for (size_t i = 0; i < items.size() && i < max; ++i) text += "\n" + indent + items[i];
  if (items.size() > max) text += fmt::format("\n{}... ({} in all)", indent, items.size());
  return text;
}

}  // namespace swavg
