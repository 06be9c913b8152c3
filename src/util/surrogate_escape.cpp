#include "util/surrogate_escape.h"

#include <cstdint>

#include "util/printable.h"

namespace swavg {

std::string surrogate_escaped(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    uint32_t cp = 0;
    const size_t len = utf8_sequence(bytes, i, cp);
    if (len > 0) {
      out.append(bytes.substr(i, len));
      i += len;
      continue;
    }
    const uint32_t s = 0xdc00 | static_cast<uint8_t>(bytes[i]);
    out += static_cast<char>(0xe0 | (s >> 12));
    out += static_cast<char>(0x80 | ((s >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (s & 0x3f));
    ++i;
  }
  return out;
}

std::string surrogate_unescaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t len = utf8_sequence(text, i, cp, /*allow_surrogates=*/true);
    if (len == 3 && cp >= 0xdc80 && cp <= 0xdcff) {
      out += static_cast<char>(cp & 0xff);
      i += 3;
    } else {
      out += text[i];
      ++i;
    }
  }
  return out;
}

}  // namespace swavg
