#include "util/printable.h"

#include <cstdint>

namespace swavg {
namespace {

const char kHex[] = "0123456789abcdef";

bool needs_escape(uint32_t cp) {
  return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) || cp == 0x061c || cp == 0x200e || cp == 0x200f ||
         (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

void append_hex(std::string& out, const char* prefix, uint32_t v, int digits) {
  out += prefix;
  for (int d = digits - 1; d >= 0; --d) out += kHex[(v >> (4 * d)) & 15];
}

std::string escape(std::string_view s, bool for_messages) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t len = utf8_sequence(s, i, cp);
    if (len == 0) {
      append_hex(out, "\\x", static_cast<uint8_t>(s[i]), 2);
      ++i;
      continue;
    }
    if (cp == '\\') {
      out += for_messages ? "\\" : "\\\\";
    } else if (cp == '\n') {
      out += for_messages ? "\n" : "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x80 && needs_escape(cp)) {
      append_hex(out, "\\x", cp, 2);
    } else if (needs_escape(cp)) {
      append_hex(out, "\\u", cp, 4);
    } else {
      out.append(s.substr(i, len));
    }
    i += len;
  }
  return out;
}

}  // namespace

size_t utf8_sequence(std::string_view s, size_t i, uint32_t& cp, bool allow_surrogates) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  size_t len;
  uint32_t min;
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  } else if ((b0 & 0xe0) == 0xc0) {
    len = 2, min = 0x80, cp = b0 & 0x1f;
  } else if ((b0 & 0xf0) == 0xe0) {
    len = 3, min = 0x800, cp = b0 & 0x0f;
  } else if ((b0 & 0xf8) == 0xf0) {
    len = 4, min = 0x10000, cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (len > s.size() - i) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto b = static_cast<uint8_t>(s[i + k]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3f);
  }
  if (cp < min || cp > 0x10ffff || (!allow_surrogates && cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return len;
}

std::string printable(std::string_view s) { return escape(s, false); }

std::string printable_lines(std::string_view s) { return escape(s, true); }

std::optional<size_t> invalid_utf8_at(std::string_view s, bool allow_surrogates) {
  uint32_t cp;
  for (size_t i = 0; i < s.size();) {
    const size_t len = utf8_sequence(s, i, cp, allow_surrogates);
    if (len == 0) return i;
    i += len;
  }
  return std::nullopt;
}

}  // namespace swavg
