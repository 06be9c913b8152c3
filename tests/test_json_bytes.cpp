#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "util/json_bytes.h"
#include "util/surrogate_escape.h"

using namespace swavg;
using namespace std::string_literals;
using json = nlohmann::ordered_json;

TEST_CASE("json_quote writes bytes that are not UTF-8 as escaped low surrogates and the rest as nlohmann does",
          "[json_bytes]") {
  CHECK(json_quote("caf\xe9.pt") == "\"caf\\udce9.pt\"");
  CHECK(json_quote("x\xff") == "\"x\\udcff\"");
  CHECK(json_quote("\x80") == "\"\\udc80\"");
  CHECK(json_quote("\xed\xb3\xa9") == "\"\\udced\\udcb3\\udca9\"");  // an encoded surrogate is not UTF-8
  CHECK(json_quote("\xc3\xa9") == "\"\xc3\xa9\"");                   // valid UTF-8 as it is
  for (const std::string s : {"plain"s, "q\"b\\n\n\t\r\b\f"s, "\x01\x1f\x7f"s, "nul\0x"s, "\xe2\x80\xae"s, ""s})
    CHECK(json_quote(s) == json(s).dump());
}

TEST_CASE("json_dump is nlohmann's dump for UTF-8, any indent", "[json_bytes]") {
  const json j = json::parse(R"({"a": [1, 2.5, "x", {"b": null, "c": true}], "d": {}, "e": [], "f": -3,
                                 "g": 1e300, "h": 0.1})");
  for (int indent : {-1, 0, 1, 2}) CHECK(json_dump(j, indent) == j.dump(indent));
  CHECK(json_dump(json::array()) == "[]");
  nlohmann::json unordered = {{"k", "v\xe9"}, {"n", 1}};
  CHECK(json_dump(unordered) == "{\"k\":\"v\\udce9\",\"n\":1}");
}

TEST_CASE("json_parse reads an escaped low surrogate back as the byte, other escapes as nlohmann does",
          "[json_bytes]") {
  const json back = json_parse(json_dump(json{{"p\xe9", {"caf\xe9", "x\xff", "\x80\xfe", "nul\0\xe9"s, "é"}}}));
  CHECK(back.begin().key() == "p\xe9");
  CHECK(back["p\xe9"] == json({"caf\xe9", "x\xff", "\x80\xfe", "nul\0\xe9"s, "é"}));
  const json j = json_parse(R"(["\ud83d\udc80", "\\udce9", "\u00e9", "\u0000\u00e9"])");
  CHECK(j[0] == "\xf0\x9f\x92\x80");  // a surrogate pair stays one character
  CHECK(j[1] == "\\udce9");           // an escaped backslash, then text
  CHECK(j[2] == "\xc3\xa9");
  CHECK(j[3] == "\0\xc3\xa9"s);               // a NUL, then é: not a byte
  CHECK_THROWS(json_parse(R"(["\udc7f"])"));  // outside the escape's range: nlohmann's error
  CHECK_THROWS(json_parse("{"));
}

TEST_CASE("marked text passes through nlohmann and back", "[json_bytes]") {
  const json j = {{"path", "caf\xe9"}, {"nul", "a\0\xc3\xa9"s}, {"n", 2}};
  const std::string final_text = json_dump(j, 1);
  const json through = json::parse(json_text_marked(final_text));
  CHECK(json_text_unmarked(through.dump(1)) == final_text);
  // With ensure_ascii, what is not ASCII stays escaped: the same JSON, other text.
  CHECK(json_parse(json_text_unmarked(through.dump(1, ' ', /*ensure_ascii=*/true))) == json_parse(final_text));
}

TEST_CASE("surrogate_escaped is the UTF-8 of os.fsdecode, pickled as Python pickles it", "[json_bytes]") {
  // pickle.dumps(b'caf\xe9'.decode('utf-8', 'surrogateescape')) holds caf\xed\xb3\xa9.
  CHECK(surrogate_escaped("caf\xe9") == "caf\xed\xb3\xa9");
  CHECK(surrogate_escaped("\x80\xff") == "\xed\xb2\x80\xed\xb3\xbf");
  CHECK(surrogate_escaped("\xc3\xa9/x") == "\xc3\xa9/x");
  for (const std::string s : {"caf\xe9"s, "\x80\xff"s, "\xc3\xa9"s, "\xed\xb3\xa9"s, "a\xc3"s, ""s})
    CHECK(surrogate_unescaped(surrogate_escaped(s)) == s);
}

TEST_CASE("json_quote leaves every printable ASCII character as it is, the space included, as nlohmann does",
          "[json_bytes]") {
  std::string ascii;
  for (char c = 0x20; c < 0x7f; ++c) ascii += c;
  CHECK(json_quote(ascii) == json(ascii).dump());
  CHECK(json_quote(" ") == "\" \"");
  CHECK(json_quote("\x1f ") == "\"\\u001f \"");  // the last control character escaped, the space not
  CHECK(json_dump(json{{"a b", "c d"}}) == "{\"a b\":\"c d\"}");
}

TEST_CASE("json_unmarked_string: a NUL and a lead byte at the very end are left as they are", "[json_bytes]") {
  // A mark is NUL, then U+0080..U+00FF as two UTF-8 bytes; with the second byte missing it is no mark.
  CHECK(json_unmarked_string("a\0\xc3\xa9"s) == "a\xe9");
  CHECK(json_unmarked_string("a\0\xc2\x80"s) == "a\x80");
  CHECK(json_unmarked_string("a\0\0"s) == "a\0"s);
  CHECK(json_unmarked_string("a\0\xc3"s) == "a\0\xc3"s);
  CHECK(json_unmarked_string("a\0\xc2"s) == "a\0\xc2"s);
  CHECK(json_unmarked_string("a\0"s) == "a\0"s);
  CHECK(json_unmarked_string("\0x"s) == "\0x"s);
}

TEST_CASE("surrogate_unescaped takes U+DC80..U+DCFF back as bytes, and leaves U+DC00..U+DC7F as they are",
          "[json_bytes]") {
  // os.fsdecode makes U+DC80..U+DCFF only (a byte under 0x80 is ASCII); below, a surrogate is text.
  CHECK(surrogate_unescaped("\xed\xb2\x80") == "\x80");            // U+DC80
  CHECK(surrogate_unescaped("\xed\xb3\xbf") == "\xff");            // U+DCFF
  CHECK(surrogate_unescaped("\xed\xb1\xbf") == "\xed\xb1\xbf");    // U+DC7F
  CHECK(surrogate_unescaped("\xed\xb0\x80x") == "\xed\xb0\x80x");  // U+DC00
  CHECK(surrogate_unescaped("\xed\xb4\x80") == "\xed\xb4\x80");    // U+DD00
  CHECK(surrogate_unescaped("\xed\xb2") == "\xed\xb2");            // cut short
}

TEST_CASE("json_text_unmarked leaves escapes other than the NUL mark (u0000) as they are", "[json_bytes]") {
  for (const std::string& text :
       {R"({"a": "x\"y\\z\n\t\/\b\f\r"})"s, R"(["\\", "\"", "\\u0000"])"s, R"(["\u00e9\u0001", "a\\\\"])"s})
    CHECK(json_text_unmarked(text) == text);
  // Through nlohmann and back, a report with such strings is the text json_dump wrote.
  const json j = {{"path", "a \"b\"\\c\nd\t"}, {"byte", "caf\xe9"}};
  const std::string final_text = json_dump(j, 1);
  CHECK(json_text_unmarked(json::parse(json_text_marked(final_text)).dump(1)) == final_text);
}
