// The pickle literal decoders (formats/pickle/pickle_literals.cpp) alone: numbers, quoted and escaped
// text and memo indexes as Python's unpickler reads them, each bound at its edge, each refusal with
// its reason.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "formats/pickle/pickle_literals.h"

using namespace swavg;
using namespace swavg::pickle_literal;
using namespace std::string_literals;

namespace {

const uint8_t* u8(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

// INT's text through decode_decimal and decode_long, as the unpickler takes it.
long_value integer(const std::string& text) {
  const std::vector<uint8_t> bytes = decode_decimal(text);
  return decode_long(bytes.data(), bytes.size());
}

std::string utf8(uint32_t cp) {
  std::string s;
  append_utf8(s, cp);
  return s;
}

}  // namespace

TEST_CASE("trim strips ASCII whitespace at both ends only", "[pickle_literals]") {
  CHECK(trim(" \t\r\n\f\vx y\v") == "x y");
  CHECK(trim("   ").empty());
  CHECK(trim("").empty());
  CHECK(trim("\xa0x") == "\xa0x");  // not ASCII whitespace
}

TEST_CASE("UTF-8 is written at each length's edge and read with surrogates", "[pickle_literals]") {
  CHECK(utf8(0x7f) == "\x7f");
  CHECK(utf8(0x80) == "\xc2\x80");
  CHECK(utf8(0x7ff) == "\xdf\xbf");
  CHECK(utf8(0x800) == "\xe0\xa0\x80");
  CHECK(utf8(0xffff) == "\xef\xbf\xbf");
  CHECK(utf8(0x10000) == "\xf0\x90\x80\x80");
  CHECK(utf8(0x10ffff) == "\xf4\x8f\xbf\xbf");
  CHECK(utf8(0xd800) == "\xed\xa0\x80");

  size_t i = 0;
  uint32_t cp = 0;
  const std::string s = "a\xed\xa0\x80\xf0\x90\x80\x80";
  REQUIRE(next_code_point(s, i, cp));
  CHECK((cp == 'a' && i == 1));
  REQUIRE(next_code_point(s, i, cp));
  CHECK((cp == 0xd800 && i == 4));
  REQUIRE(next_code_point(s, i, cp));
  CHECK((cp == 0x10000 && i == 8));
  i = 0;
  CHECK_FALSE(next_code_point("\xff", i, cp));
  CHECK(valid_text("caf\xc3\xa9 \xed\xa0\x80"));
  CHECK_FALSE(valid_text("\xc0\x80"));  // overlong
  CHECK_FALSE(valid_text("\xff"));
}

TEST_CASE("hex digits", "[pickle_literals]") {
  CHECK(hex_value('0') == 0);
  CHECK(hex_value('9') == 9);
  CHECK(hex_value('a') == 10);
  CHECK(hex_value('F') == 15);
  CHECK(hex_value('g') == -1);
  CHECK(hex_value('/') == -1);
  CHECK(hex_value(':') == -1);
}

TEST_CASE("decimal integers of any size, up to 4300 digits", "[pickle_literals]") {
  CHECK(integer("0").fits);
  CHECK(integer("0").value == 0);
  CHECK(integer("  -42\n").value == -42);
  CHECK(integer("+7").value == 7);
  CHECK(integer("9223372036854775807").value == std::numeric_limits<int64_t>::max());
  CHECK(integer("-9223372036854775808").value == std::numeric_limits<int64_t>::min());
  const long_value big = integer("9223372036854775808");
  CHECK_FALSE(big.fits);
  CHECK(big.bytes == "\0\0\0\0\0\0\0\x80\0"s);
  const long_value negative = integer("-9223372036854775809");
  CHECK_FALSE(negative.fits);
  CHECK(negative.bytes == "\xff\xff\xff\xff\xff\xff\xff\x7f\xff"s);

  CHECK(decode_decimal(std::string(kMaxDecimalDigits, '9')).size() > 1700);
  CHECK(decode_decimal("-" + std::string(kMaxDecimalDigits, '1')).size() > 1700);
  CHECK_THROWS_WITH(decode_decimal(std::string(kMaxDecimalDigits + 1, '9')), "integer literal too long");
  CHECK_THROWS_WITH(decode_decimal(std::string(kMaxDecimalDigits + 1, 'x')), "integer literal too long");
  for (const char* bad : {"", "-", "+", " ", "1x", "1 2", "--1", "0x10", "1.0"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_AS(decode_decimal(bad), pickle_literal_error);
    CHECK_THROWS_WITH(decode_decimal(bad), "bad integer literal");
  }
}

TEST_CASE("LONG1 and LONG4 bytes in their minimal form", "[pickle_literals]") {
  auto decoded = [](const std::string& s) { return decode_long(u8(s), s.size()); };
  CHECK((decoded("").fits && decoded("").value == 0));
  CHECK(decoded("\xff").value == -1);
  CHECK(decoded("\x80").value == -128);
  CHECK(decoded("\x80\x00"s).value == 128);
  CHECK(decoded("\xff\xff").value == -1);
  CHECK(decoded("\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00"s).value == 1);
  const long_value min = decoded("\0\0\0\0\0\0\0\x80\xff"s);
  CHECK((min.fits && min.value == std::numeric_limits<int64_t>::min()));
  const long_value past = decoded("\0\0\0\0\0\0\0\x80\0\0"s);
  CHECK_FALSE(past.fits);
  CHECK(past.bytes == "\0\0\0\0\0\0\0\x80\0"s);
}

TEST_CASE("FLOAT text as Python's float() reads it, beyond double's range too", "[pickle_literals]") {
  CHECK(decode_float("1.5") == 1.5);
  CHECK(decode_float(" -2.5e3\n") == -2500.0);
  CHECK(decode_float("+3") == 3.0);
  CHECK(std::isinf(decode_float("inf")));
  CHECK(std::isnan(decode_float("nan")));
  CHECK(decode_float("1e400") == HUGE_VAL);
  CHECK(decode_float("-1e400") == -HUGE_VAL);
  CHECK(decode_float("1e-400") == 0.0);
  CHECK(std::signbit(decode_float("-1e-400")));
  CHECK(decode_float("0.0001e313") == HUGE_VAL);
  CHECK(decode_float("1000e-400") == 0.0);
  for (const char* bad : {"", " ", "+", "++1", "1.5x", "1,5", "0x1p3"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_WITH(decode_float(bad), "bad float literal");
  }
  CHECK(out_of_range_float("-12.5e400") == -HUGE_VAL);
  CHECK(out_of_range_float("0.001e-320") == 0.0);
}

TEST_CASE("BINFLOAT is a big-endian double", "[pickle_literals]") {
  CHECK(decode_binfloat(u8("\x3f\xf0\0\0\0\0\0\0"s)) == 1.0);
  CHECK(decode_binfloat(u8("\xc0\x04\0\0\0\0\0\0"s)) == -2.5);
  CHECK(std::signbit(decode_binfloat(u8("\x80\0\0\0\0\0\0\0"s))));
}

TEST_CASE("STRING's quoted literal with Python 2 escapes", "[pickle_literals]") {
  CHECK(decode_string("'abc'") == "abc");
  CHECK(decode_string("\"it's\"") == "it's");
  CHECK(decode_string("''").empty());
  CHECK(decode_string(R"('a\x41\n\101\q\\\'\"')") == "aA\nA\\q\\'\"");
  CHECK(decode_string(R"('\a\b\f\r\t\v')") == "\a\b\f\r\t\v");
  CHECK(decode_string("'\\0'") == "\0"s);
  CHECK(decode_string("'\\777'") == "\xff");
  CHECK(decode_string("'\\1234'") == "S4");
  CHECK(decode_string("'a\\\nb'") == "ab");
  for (const char* unquoted : {"", "'", "abc", "'abc", "'abc\"", "\"abc'"}) {
    INFO("'" << unquoted << "'");
    CHECK_THROWS_WITH(decode_string(unquoted), "the STRING argument must be quoted");
  }
  CHECK_THROWS_WITH(decode_string("'\\'"), "trailing backslash in STRING");
  CHECK_THROWS_WITH(decode_string("'\\x4'"), "bad \\x escape in STRING");
  CHECK_THROWS_WITH(decode_string("'\\xg0'"), "bad \\x escape in STRING");
  CHECK(decode_string("'\\x4f'") == "O");
}

TEST_CASE("UNICODE's raw-unicode-escape text becomes UTF-8", "[pickle_literals]") {
  CHECK(decode_raw_unicode("abc") == "abc");
  CHECK(decode_raw_unicode("\xe9") == "\xc3\xa9");
  CHECK(decode_raw_unicode("\\u00e9") == "\xc3\xa9");
  CHECK(decode_raw_unicode("\\U0001F600") == "\xf0\x9f\x98\x80");
  CHECK(decode_raw_unicode("\\U0010ffff") == "\xf4\x8f\xbf\xbf");
  CHECK(decode_raw_unicode("\\ud800") == "\xed\xa0\x80");
  CHECK(decode_raw_unicode("\\x41") == "\\x41");
  CHECK(decode_raw_unicode("\\\xe9") == "\\\xc3\xa9");
  CHECK(decode_raw_unicode("a\\") == "a\\");
  CHECK_THROWS_WITH(decode_raw_unicode("\\u12"), "truncated \\u escape in UNICODE");
  CHECK_THROWS_WITH(decode_raw_unicode("\\U0010fff"), "truncated \\u escape in UNICODE");
  CHECK_THROWS_WITH(decode_raw_unicode("\\u12g4"), "bad \\u escape in UNICODE");
  CHECK_THROWS_WITH(decode_raw_unicode("\\U00110000"), "\\U escape out of range in UNICODE");
}

TEST_CASE("_codecs.encode's latin-1: code points below 256 only", "[pickle_literals]") {
  CHECK(encode_latin1("abc") == "abc");
  CHECK(encode_latin1("\xc3\xa9\xc3\xbf") == "\xe9\xff");
  CHECK(encode_latin1("").empty());
  CHECK_THROWS_WITH(encode_latin1("\xc4\x80"), "_codecs.encode: text is not latin-1");
  CHECK_THROWS_WITH(encode_latin1("a\xff"), "_codecs.encode: text is not latin-1");
}

TEST_CASE("memo indexes are unsigned 64-bit decimals", "[pickle_literals]") {
  CHECK(decode_memo_index("0") == 0);
  CHECK(decode_memo_index(" 12\r") == 12);
  CHECK(decode_memo_index("18446744073709551615") == std::numeric_limits<uint64_t>::max());
  for (const char* bad : {"", " ", "-1", "+1", "1a", "18446744073709551616", "1 2"}) {
    INFO("'" << bad << "'");
    CHECK_THROWS_WITH(decode_memo_index(bad), "bad memo index");
  }
}
