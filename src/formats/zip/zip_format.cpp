// How zip_reader and zip_writer print a record's name, and the ASCII test behind the UTF-8 flag.
#include "formats/zip/zip_format.h"

#include <algorithm>
#include <cstdio>

#include "util/printable.h"

namespace swavg::zip_format {
namespace {

constexpr size_t kMaxNameInMessage = 200;

}  // namespace

// A name from the file, safe to print: control bytes escaped (and bytes past ASCII unless the name
// is valid UTF-8), long names cut between characters.
std::string quoted(std::string_view name) {
  const bool utf8 = valid_utf8(name);
  std::string out = "'";
  for (size_t i = 0; i < name.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (i >= kMaxNameInMessage && !(utf8 && (c & 0xC0) == 0x80)) {
      out += "...";
      break;
    }
    if (c < 0x20 || c == 0x7f || c == '\\' || (c >= 0x80 && !utf8)) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

}  // namespace swavg::zip_format
