/*
 * util/listing: the one list formatter of messages. The cut at the limit (exactly at it and one
 * past), the cut of a long item between UTF-8 characters, escapes, and the word for no items.
 */
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "util/listing.h"

using namespace swavg;

TEST_CASE("quoted_list lists at most 20 items, then how many in all", "[listing][unit]") {
  CHECK(quoted_list({}) == "none");
  CHECK(quoted_list({"a"}) == "'a'");
  CHECK(quoted_list({"a", "b"}) == "'a', 'b'");
  const std::vector<std::string> twenty(kMaxListedItems, "x"), twenty_one(kMaxListedItems + 1, "x");
  CHECK(quoted_list(twenty).find("in all") == std::string::npos);
  CHECK(quoted_list(twenty_one) == quoted_list(twenty) + ", ... (21 in all)");
  CHECK(quoted_list({"a", "b", "c"}, 2) == "'a', 'b', ... (3 in all)");
  CHECK(quoted_list({"a", "b"}, 2) == "'a', 'b'");
  CHECK(quoted_list({"a"}, 0) == "... (1 in all)");
}

TEST_CASE("quoted_list cuts each item at 200 bytes and escapes what is not printable", "[listing][unit]") {
  const std::string a200(200, 'a'), a201(201, 'a');
  CHECK(quoted_list({a200}) == "'" + a200 + "'");
  CHECK(quoted_list({a201}) == "'" + a200 + "...'");
  // A character across the cut is left out whole, never split.
  const std::string across = std::string(199, 'a') + "\xc3\xa9" + "b";
  CHECK(quoted_list({across}) == "'" + std::string(199, 'a') + "...'");
  CHECK(quoted_list({"a\nb", "\x1b[31m"}) == "'a\\nb', '\\x1b[31m'");
  CHECK(quoted_list({""}) == "''");
}

TEST_CASE("cut_text keeps short text and cuts long text between characters", "[listing][unit]") {
  CHECK(cut_text("abc", 3) == "abc");
  CHECK(cut_text("abcd", 3) == "abc...");
  CHECK(cut_text("a\xc3\xa9", 2) == "a...");
  CHECK(cut_text("", 0) == "");
}

TEST_CASE("listed_lines puts each item on its own line, exactly at the limit and one past it", "[listing][unit]") {
  CHECK(listed_lines({}, 2) == "");
  CHECK(listed_lines({"a", "b"}, 2) == "\n  a\n  b");
  CHECK(listed_lines({"a", "b", "c"}, 2) == "\n  a\n  b\n  ... (3 in all)");
  CHECK(listed_lines({"a"}, 1, "    ") == "\n    a");
}
