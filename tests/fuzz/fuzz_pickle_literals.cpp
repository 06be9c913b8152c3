// libFuzzer target: the pickle literal decoders (formats/pickle/pickle_literals.cpp) on arbitrary text.
// Each either decodes or refuses with pickle_literal_error; what they give back keeps its promises:
// UNICODE's text is valid (surrogate-passing) UTF-8, STRING's bytes are no longer than the literal,
// a LONG is minimal and round-trips, small decimals agree with std::from_chars.
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "formats/pickle/pickle_literals.h"
#include "fuzz_common.h"

namespace {

using namespace swavg;
using namespace swavg::pickle_literal;

template <typename F>
void refused_or(F&& f) {
  try {
    f();
  } catch (const pickle_literal_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes = fuzz::bytes(data, size);
  const std::string_view s = bytes;

  refused_or([&] {
    const std::string text = decode_raw_unicode(s);
    if (!valid_text(text)) fuzz::die("UNICODE decoded to invalid UTF-8");
  });
  refused_or([&] {
    if (decode_string(s).size() + 2 > s.size()) fuzz::die("STRING decoded to more bytes than its literal");
  });
  refused_or([&] {
    const std::string latin1 = encode_latin1(s);
    if (latin1.size() > s.size()) fuzz::die("latin-1 longer than its UTF-8");
  });
  refused_or([&] { (void)decode_float(s); });
  refused_or([&] { (void)decode_memo_index(s); });
  refused_or([&] {
    const std::vector<uint8_t> le = decode_decimal(s);
    const long_value v = decode_long(le.data(), le.size());
    // Up to 18 digits the value fits int64, and std::from_chars reads the same.
    std::string_view digits = trim(s);
    if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
    if (digits.size() <= 18) {
      int64_t want = 0;
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), want);
      if (ec != std::errc() || end != digits.data() + digits.size())
        fuzz::die("decimal accepted what from_chars refuses");
      if (!v.fits || v.value != want) fuzz::die("decimal differs from from_chars");
    }
  });

  // The bytes as LONG1/LONG4's argument: minimal, and the same value again from its minimal form.
  const long_value v = decode_long(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  if (v.fits) {
    uint8_t le[8];
    std::memcpy(le, &v.value, sizeof le);
    const long_value again = decode_long(le, sizeof le);
    if (!again.fits || again.value != v.value) fuzz::die("an int64 LONG does not round-trip");
  } else {
    if (v.bytes.size() <= 8) fuzz::die("a LONG that fits int64 was kept as bytes");
    const size_t n = v.bytes.size();
    const auto last = static_cast<uint8_t>(v.bytes[n - 1]), before = static_cast<uint8_t>(v.bytes[n - 2]);
    if ((last == 0x00 && !(before & 0x80)) || (last == 0xff && (before & 0x80))) fuzz::die("a LONG is not minimal");
    const long_value again = decode_long(reinterpret_cast<const uint8_t*>(v.bytes.data()), n);
    if (again.fits || again.bytes != v.bytes) fuzz::die("a big LONG does not round-trip");
  }
  if (size >= 8) (void)decode_binfloat(data);
  return 0;
}
