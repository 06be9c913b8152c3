#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

#include "util/printable.h"

using namespace swavg;
using namespace std::string_literals;

TEST_CASE("printable escapes what could hide or reorder text", "[printable]") {
  struct named {
    std::string in, out;
  };
  const std::vector<named> cases = {
      {"layer1.0.conv1.weight", "layer1.0.conv1.weight"},
      {"", ""},
      {"\x1b[2Jcleared", "\\x1b[2Jcleared"},
      {"a\nb\rc\td", "a\\nb\\rc\\td"},
      {"nul\0x"s, "nul\\x00x"},
      {"\x01\x1f\x7f", "\\x01\\x1f\\x7f"},
      {"back\\slash", "back\\\\slash"},
      {"\xc2\x85"
       "next line \xc2\x9b"
       "csi",
       "\\u0085next line \\u009bcsi"},  // C1 controls
      {"\xc2\xa0"
       "nbsp",
       "\xc2\xa0"
       "nbsp"},  // the first code point past C1
      {"\xe2\x80\xae"
       "evil\xe2\x80\xac",
       "\\u202eevil\\u202c"},  // bidi override, pop
      {"\xe2\x80\xaa\xe2\x80\xad", "\\u202a\\u202d"},
      {"\xe2\x81\xa6\xe2\x81\xa9", "\\u2066\\u2069"},                 // isolates
      {"\xe2\x81\xa5\xe2\x81\xaa", "\xe2\x81\xa5\xe2\x81\xaa"},       // U+2065, U+206A are not escaped
      {"\xe2\x80\xa7\xe2\x80\xaf", "\xe2\x80\xa7\xe2\x80\xaf"},       // U+2027, U+202F neither
      {"\xe2\x80\xa8\xe2\x80\xa9", "\\u2028\\u2029"},                 // line and paragraph separators
      {"\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c", "\\u200e\\u200f\\u061c"},  // direction marks
      {"\xc3\xbcn\xc3\xaf"
       "c\xc3\xb6"
       "d\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80",
       "\xc3\xbcn\xc3\xaf"
       "c\xc3\xb6"
       "d\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80"},
      {"bad \xff\xfe", "bad \\xff\\xfe"},            // not UTF-8
      {"\xc3", "\\xc3"},                             // truncated
      {"\xc0\xaf", "\\xc0\\xaf"},                    // overlong
      {"\xed\xa0\x80", "\\xed\\xa0\\x80"},           // a surrogate
      {"\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"},  // past U+10FFFF
      {"\xe2\x80", "\\xe2\\x80"},
  };
  for (const auto& c : cases) {
    INFO(c.in);
    CHECK(printable(c.in) == c.out);
  }
}

TEST_CASE("printable_lines keeps line breaks and backslashes", "[printable]") {
  CHECK(printable_lines("first\nsecond \x1b[31m\\x \xe2\x80\xae\xff") == "first\nsecond \\x1b[31m\\x \\u202e\\xff");
  CHECK(printable_lines("a\r\tb") == "a\\r\\tb");
}

TEST_CASE("invalid_utf8_at finds the first bad sequence, at the edges of each range", "[printable]") {
  struct named {
    std::string in;
    std::optional<size_t> strict;      // surrogates refused
    std::optional<size_t> surrogates;  // surrogates allowed (pickle text)
  };
  const std::vector<named> cases = {
      {"", std::nullopt, std::nullopt},
      {"ab\x7f", std::nullopt, std::nullopt},
      {"a\x80", 1, 1},                                   // a lone continuation byte
      {"\xc2\x80", std::nullopt, std::nullopt},          // U+0080: the smallest 2-byte form
      {"a\xc1\xbf", 1, 1},                               // U+007F in 2 bytes: overlong
      {"\xe0\xa0\x80", std::nullopt, std::nullopt},      // U+0800: the smallest 3-byte form
      {"\xe0\x9f\xbf", 0, 0},                            // U+07FF in 3 bytes: overlong
      {"\xed\x9f\xbf", std::nullopt, std::nullopt},      // U+D7FF: the last before the surrogates
      {"x\xed\xa0\x80", 1, std::nullopt},                // U+D800: the first surrogate
      {"\xed\xbf\xbf", 0, std::nullopt},                 // U+DFFF: the last surrogate
      {"\xee\x80\x80", std::nullopt, std::nullopt},      // U+E000
      {"\xf0\x90\x80\x80", std::nullopt, std::nullopt},  // U+10000: the smallest 4-byte form
      {"\xf0\x8f\xbf\xbf", 0, 0},                        // U+FFFF in 4 bytes: overlong
      {"\xf4\x8f\xbf\xbf", std::nullopt, std::nullopt},  // U+10FFFF: the largest
      {"ok\xf4\x90\x80\x80", 2, 2},                      // U+110000
      {"\xe2\x82", 0, 0},                                // cut short
      {"\xf8\x88\x80\x80\x80", 0, 0},                    // a 5-byte lead
  };
  for (const auto& c : cases) {
    INFO(printable(c.in));
    CHECK(invalid_utf8_at(c.in) == c.strict);
    CHECK(invalid_utf8_at(c.in, true) == c.surrogates);
    CHECK(valid_utf8(c.in) == !c.strict);
  }
}
