// The pickle literal decoders (see pickle_literals.h): pure functions, errors as pickle_literal_error.
#include "formats/pickle/pickle_literals.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "util/checked.h"
#include "util/printable.h"

namespace swavg::pickle_literal {
namespace {

[[noreturn]] void fail(const char* what) { throw pickle_literal_error(what); }

bool is_ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

}  // namespace

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

bool next_code_point(std::string_view s, size_t& i, uint32_t& cp) {
  const size_t len = utf8_sequence(s, i, cp, true);
  i += len;
  return len != 0;
}

bool valid_text(std::string_view s) { return valid_utf8(s, true); }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

double out_of_range_float(std::string_view s) {
  const bool negative = !s.empty() && s.front() == '-';
  if (negative) s.remove_prefix(1);
  const size_t e = s.find_first_of("eE");
  const std::string_view mantissa = s.substr(0, e);
  int64_t exponent = 0;
  if (e != std::string_view::npos) {
    std::string_view x = s.substr(e + 1);
    const bool x_negative = !x.empty() && x.front() == '-';
    if (!x.empty() && (x.front() == '-' || x.front() == '+')) x.remove_prefix(1);
    for (char c : x) exponent = std::min<int64_t>(exponent * 10 + (c - '0'), int64_t{1} << 40);
    if (x_negative) exponent = -exponent;
  }
  // The position of the first nonzero digit relative to the decimal point.
  const size_t point = std::min(mantissa.find('.'), mantissa.size());
  const size_t first = mantissa.find_first_not_of("0.");
  int64_t order = 0;
  if (first != std::string_view::npos)
    order = first < point ? static_cast<int64_t>(point - first) : -static_cast<int64_t>(first - point);
  const double magnitude = order + exponent > 0 ? HUGE_VAL : 0.0;
  return negative ? -magnitude : magnitude;
}

double decode_float(std::string_view s) {
  s = trim(s);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || end != s.data() + s.size() || (ec != std::errc() && ec != std::errc::result_out_of_range))
    fail("bad float literal");
  if (ec == std::errc::result_out_of_range) v = out_of_range_float(s);
  return v;
}

double decode_binfloat(const uint8_t* p) {
  uint64_t bits = 0;
  for (int i = 0; i < 8; ++i) bits = (bits << 8) | p[i];
  double v;
  std::memcpy(&v, &bits, sizeof bits);
  return v;
}

std::vector<uint8_t> decode_decimal(std::string_view s) {
  s = trim(s);
  bool negative = false;
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) {
    negative = s.front() == '-';
    s.remove_prefix(1);
  }
  if (s.empty()) fail("bad integer literal");
  if (s.size() > kMaxDecimalDigits) fail("integer literal too long");
  // Magnitude in 32-bit limbs, least significant first.
  std::vector<uint32_t> limbs;
  for (char c : s) {
    if (c < '0' || c > '9') fail("bad integer literal");
    uint64_t carry = static_cast<uint64_t>(c - '0');
    for (uint32_t& l : limbs) {
      const uint64_t t = static_cast<uint64_t>(l) * 10 + carry;
      l = static_cast<uint32_t>(t);
      carry = t >> 32;
    }
    if (carry) limbs.push_back(static_cast<uint32_t>(carry));
  }
  std::vector<uint8_t> bytes(limbs.size() * 4 + 1, 0);
  for (size_t i = 0; i < limbs.size(); ++i) store_le<uint32_t>(bytes.data() + 4 * i, limbs[i]);
  if (negative) {
    unsigned carry = 1;
    for (uint8_t& b : bytes) {
      const unsigned t = static_cast<uint8_t>(~b) + carry;
      b = static_cast<uint8_t>(t);
      carry = t >> 8;
    }
  }
  return bytes;
}

long_value decode_long(const uint8_t* p, size_t len) {
  long_value out;
  while (len > 1 && ((p[len - 1] == 0x00 && !(p[len - 2] & 0x80)) || (p[len - 1] == 0xff && (p[len - 2] & 0x80))))
    --len;
  if (len <= 8) {
    uint64_t v = 0;
    for (size_t i = 0; i < len; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
    if (len > 0 && len < 8 && (p[len - 1] & 0x80)) v |= ~uint64_t{0} << (8 * len);
    out.fits = true;
    std::memcpy(&out.value, &v, sizeof v);
  } else {
    out.fits = false;
    out.bytes.assign(reinterpret_cast<const char*>(p), len);
  }
  return out;
}

std::string decode_string(std::string_view s) {
  if (s.size() < 2 || s.front() != s.back() || (s.front() != '\'' && s.front() != '"'))
    fail("the STRING argument must be quoted");
  s = s.substr(1, s.size() - 2);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    if (++i == s.size()) fail("trailing backslash in STRING");
    const char c = s[i];
    switch (c) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': {
        if (s.size() - i < 3 || hex_value(s[i + 1]) < 0 || hex_value(s[i + 2]) < 0) fail("bad \\x escape in STRING");
        out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
        i += 2;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          int v = c - '0';
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            v = v * 8 + (s[++i] - '0');
          out += static_cast<char>(v & 0xff);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

std::string decode_raw_unicode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<uint8_t>(s[i]);
    if (c != '\\' || i + 1 == s.size()) {
      append_utf8(out, c);
      continue;
    }
    const char e = s[i + 1];
    if (e != 'u' && e != 'U') {
      out += '\\';
      append_utf8(out, static_cast<uint8_t>(e));
      ++i;
      continue;
    }
    const size_t digits = e == 'u' ? 4 : 8;
    if (s.size() - i - 2 < digits) fail("truncated \\u escape in UNICODE");
    uint32_t cp = 0;
    for (size_t k = 0; k < digits; ++k) {
      const int h = hex_value(s[i + 2 + k]);
      if (h < 0) fail("bad \\u escape in UNICODE");
      cp = cp * 16 + static_cast<uint32_t>(h);
    }
    if (cp > 0x10ffff) fail("\\U escape out of range in UNICODE");
    append_utf8(out, cp);
    i += 1 + digits;
  }
  return out;
}

std::string encode_latin1(std::string_view s) {
  std::string latin1;
  latin1.reserve(s.size());
  size_t i = 0;
  uint32_t cp;
  while (i < s.size()) {
    if (!next_code_point(s, i, cp) || cp > 0xff) fail("_codecs.encode: text is not latin-1");
    latin1 += static_cast<char>(cp);
  }
  return latin1;
}

uint64_t decode_memo_index(std::string_view text) {
  const std::string_view s = trim(text);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) fail("bad memo index");
  return v;
}

}  // namespace swavg::pickle_literal
