/*
 * The literals of pickle opcodes, decoded as Python's unpickler decodes them: pure functions from
 * an opcode's argument bytes to a value, apart from the stack machine (formats/pickle/unpickler.cpp) so that
 * each can be tested and fuzzed alone. Text opcodes of protocol 0 (INT, LONG, FLOAT, STRING, UNICODE,
 * GET/PUT) carry decimal, quoted or escaped text; LONG1/LONG4 and BINFLOAT carry binary numbers.
 *
 * A malformed literal throws pickle_literal_error with the reason ("bad integer literal", ...); the
 * unpickler puts the file, byte offset and opcode in front of it.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace swavg {

class pickle_literal_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace pickle_literal {

// Python refuses longer decimal integer literals (sys.int_info.default_max_str_digits); the limit
// also keeps the quadratic decimal conversion cheap.
inline constexpr size_t kMaxDecimalDigits = 4300;

// The text without leading and trailing ASCII whitespace (as int() and float() strip it).
std::string_view trim(std::string_view s);

// Appends code point `cp` (at most 0x10ffff, surrogates allowed) as UTF-8.
void append_utf8(std::string& out, uint32_t cp);

// Decodes one UTF-8 sequence at s[i], advancing i. Surrogates are accepted, as Python's
// "surrogatepass" handler does for BINUNICODE. Returns false for malformed input.
bool next_code_point(std::string_view s, size_t& i, uint32_t& cp);

// Python's pickle writes str as UTF-8 with surrogates passed through ("surrogatepass").
bool valid_text(std::string_view s);

// 0-15 for a hex digit (either case), -1 for anything else.
int hex_value(char c);

// What Python's float() gives for a well-formed decimal literal beyond double's range: +-inf when
// its decimal order of magnitude is positive, +-0 when negative.
double out_of_range_float(std::string_view s);

// FLOAT's argument: decimal text (whitespace around it, an optional sign, "inf", "nan", exponents).
double decode_float(std::string_view s);

// BINFLOAT's argument: 8 bytes of a big-endian IEEE double.
double decode_binfloat(const uint8_t* p);

// INT's and LONG's argument (without LONG's 'L'): decimal text of any size, at most
// kMaxDecimalDigits digits, as little-endian two's complement bytes (one more than the magnitude
// needs, so the sign bit is right; not minimal: decode_long makes it so).
std::vector<uint8_t> decode_decimal(std::string_view s);

// LONG1's and LONG4's argument, little-endian two's complement, in its minimal form: an int64
// when it fits, else the shortest bytes that keep the value.
struct long_value {
  bool fits = true;  // value holds it; else bytes does
  int64_t value = 0;
  std::string bytes;  // the minimal little-endian two's complement bytes
};
long_value decode_long(const uint8_t* p, size_t len);

// STRING's argument: a quoted Python 2 literal with backslash escapes, as its bytes.
std::string decode_string(std::string_view s);

// UNICODE's argument: raw-unicode-escape (latin-1 bytes with \uXXXX and \UXXXXXXXX escapes), as
// UTF-8.
std::string decode_raw_unicode(std::string_view s);

// _codecs.encode(text, "latin1"), as protocols 0-2 write bytes: the UTF-8 text's code points, each
// below 256, as bytes.
std::string encode_latin1(std::string_view utf8);

// GET's and PUT's argument: a decimal memo index (whitespace around it allowed).
uint64_t decode_memo_index(std::string_view s);

}  // namespace pickle_literal
}  // namespace swavg
