#include "util/json_bytes.h"

#include <cstdint>
#include <utility>

#include "util/printable.h"

namespace swavg {
namespace {

const char kHex[] = "0123456789abcdef";

void append_u(std::string& out, uint32_t v) {
  out += "\\u";
  for (int d = 3; d >= 0; --d) out += kHex[(v >> (4 * d)) & 15];
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The value of the \uXXXX escape at text[i] (text[i] == '\\'), or -1.
int32_t u_escape_at(std::string_view text, size_t i) {
  if (i + 6 > text.size() || text[i] != '\\' || text[i + 1] != 'u') return -1;
  int32_t v = 0;
  for (size_t k = 2; k < 6; ++k) {
    const int h = hex_value(text[i + k]);
    if (h < 0) return -1;
    v = v * 16 + h;
  }
  return v;
}

// Copies `text` (JSON as nlohmann dumps it), handing each backslash inside a string to
// `escape(out, i)`, which appends what stands for the escape at text[i] and returns where the text
// goes on.
template <typename escape_fn>
std::string rewrite_escapes(std::string_view text, escape_fn&& escape) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '"') in_string = !in_string;
    if (!in_string || c != '\\' || i + 1 >= text.size()) {
      out += c;
      ++i;
      continue;
    }
    i = escape(out, i);
  }
  return out;
}

}  // namespace

std::string json_text_marked(std::string_view text) {
  return rewrite_escapes(text, [text](std::string& out, size_t i) -> size_t {
    const int32_t v = u_escape_at(text, i);
    if (v >= 0xd800 && v <= 0xdbff && u_escape_at(text, i + 6) >= 0xdc00 && u_escape_at(text, i + 6) <= 0xdfff) {
      out.append(text.substr(i, 12));  // a surrogate pair: one character
      return i + 12;
    }
    if (v >= 0xdc80 && v <= 0xdcff) {
      append_u(out, 0);
      append_u(out, static_cast<uint32_t>(v & 0xff));
      return i + 6;
    }
    if (v == 0) {
      append_u(out, 0);
      append_u(out, 0);
      return i + 6;
    }
    out.append(text.substr(i, 2));  // any other escape; \uXXXX's digits follow as plain text
    return i + 2;
  });
}

// The inverse of json_text_marked, on text as nlohmann dumps it: U+00XX raw (two UTF-8 bytes) or
// escaped.
std::string json_text_unmarked(std::string_view text) {
  return rewrite_escapes(text, [text](std::string& out, size_t i) -> size_t {
    if (u_escape_at(text, i) != 0) {
      out.append(text.substr(i, 2));
      return i + 2;
    }
    const size_t next = i + 6;
    const int32_t escaped = u_escape_at(text, next);
    const auto b0 = next < text.size() ? static_cast<uint8_t>(text[next]) : 0;
    if (escaped == 0 || (escaped >= 0x80 && escaped <= 0xff)) {
      append_u(out, escaped == 0 ? 0 : 0xdc00 | static_cast<uint32_t>(escaped));
      return next + 6;
    }
    if ((b0 == 0xc2 || b0 == 0xc3) && next + 1 < text.size()) {
      append_u(out, 0xdc00 | (((b0 & 0x1fu) << 6) | (static_cast<uint8_t>(text[next + 1]) & 0x3fu)));
      return next + 2;
    }
    append_u(out, 0);  // not a mark: a NUL as it was
    return next;
  });
}

std::string json_unmarked_string(const std::string& s) {
  if (s.find('\0') == std::string::npos) return s;
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\0' || i + 1 >= s.size()) {
      out += s[i];
    } else if (s[i + 1] == '\0') {
      out += '\0';
      ++i;
    } else if (i + 2 < s.size() && (s[i + 1] == '\xc2' || s[i + 1] == '\xc3')) {
      const auto hi = static_cast<uint8_t>(s[i + 1]), lo = static_cast<uint8_t>(s[i + 2]);
      out += static_cast<char>(((hi & 0x1f) << 6) | (lo & 0x3f));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

void append_json_quoted(std::string& out, std::string_view s) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = 0;
    const size_t len = utf8_sequence(s, i, cp);
    if (len == 0) {
      append_u(out, 0xdc00 | static_cast<uint8_t>(s[i]));
      ++i;
      continue;
    }
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (cp < 0x20)
          append_u(out, cp);
        else
          out.append(s.substr(i, len));
    }
    i += len;
  }
  out += '"';
}

std::string json_quote(std::string_view s) {
  std::string out;
  append_json_quoted(out, s);
  return out;
}

}  // namespace swavg
