// Which checkpoints are gathered, in which order: the --inputs-from list rules and sorting
// (choosing among them: tests/test_selection.cpp).
#include <catch2/catch.hpp>

#include "cli/input_list.h"
#include "util/error.h"

using namespace swavg;

TEST_CASE("natural order puts ckpt_2 before ckpt_10", "[input_list]") {
  input_selection s;
  s.paths = {"ckpt_10.pt", "ckpt_2.pt", "ckpt_1.pt", "ckpt_02b.pt", "a.pt"};
  s.sort = sort_order::natural;
  CHECK(select_inputs(s) == std::vector<std::string>{"a.pt", "ckpt_1.pt", "ckpt_2.pt", "ckpt_02b.pt", "ckpt_10.pt"});
  s.sort = sort_order::name;
  CHECK(select_inputs(s) == std::vector<std::string>{"a.pt", "ckpt_02b.pt", "ckpt_1.pt", "ckpt_10.pt", "ckpt_2.pt"});
}

TEST_CASE("step order is the default and --sort none keeps the order given", "[input_list]") {
  input_selection s;
  s.paths = {"run/checkpoint-1000/", "run/checkpoint-1500/", "run/checkpoint-500/"};  // as a shell glob gives
  CHECK(s.sort == sort_order::natural);
  CHECK(select_inputs(s) ==
        std::vector<std::string>{"run/checkpoint-500/", "run/checkpoint-1000/", "run/checkpoint-1500/"});
  s.sort = sort_order::none;
  CHECK(select_inputs(s) == s.paths);
  CHECK(std::string(sort_order_name(sort_order::natural)) == "natural");
  CHECK(std::string(sort_order_name(sort_order::none)) == "none");
}

TEST_CASE("natural order skips leading zeros and is total", "[input_list]") {
  CHECK(natural_less("ckpt_0001", "ckpt_002"));
  CHECK(natural_less("ckpt_002", "ckpt_10"));
  CHECK_FALSE(natural_less("ckpt_10", "ckpt_0001"));
  // Equal as numbers: byte order decides, both ways, so the result does not depend on the input order.
  CHECK(natural_less("ckpt_01", "ckpt_1"));
  CHECK_FALSE(natural_less("ckpt_1", "ckpt_01"));
  CHECK_FALSE(natural_less("ckpt_1", "ckpt_1"));
  // Bytes past 0x7f (UTF-8, Latin-1 names) sort after ASCII, as in byte order.
  CHECK(natural_less("ckpt_z", "ckpt_\xe9"));
  CHECK(natural_less("a", "a1"));
  CHECK_FALSE(natural_less("a1", "a"));
  input_selection s;
  s.paths = {"ckpt_10", "ckpt_002", "ckpt_0001"};
  CHECK(select_inputs(s) == std::vector<std::string>{"ckpt_0001", "ckpt_002", "ckpt_10"});
}

TEST_CASE("the order line names the order, the first and the last input", "[input_list]") {
  CHECK(fold_order_line({"a_1.pt", "a_2.pt", "a_10.pt"}, "natural") ==
        "folded in natural (step) order: first a_1.pt, last a_10.pt");
  CHECK(fold_order_line({"b.pt", "a.pt"}, "none") == "folded in the order given (--sort none): first b.pt, last a.pt");
  CHECK(fold_order_line({"only.pt"}, "natural") == "folded one input: only.pt");
  CHECK(fold_order_line({"x\ny.pt", "z.pt"}, "mtime") ==
        "folded in mtime order (--sort mtime): first x\\ny.pt, last z.pt");
}

TEST_CASE("no input at all is refused", "[input_list]") {
  input_selection empty;
  CHECK_THROWS_WITH(select_inputs(empty), Catch::Contains("no input"));
}

namespace {

using namespace std::string_literals;  // "a\0b"s keeps the NUL
using paths = std::vector<std::string>;

}  // namespace

TEST_CASE("a list's lines are paths byte for byte, but for the line end", "[input_list]") {
  struct list_case {
    std::string text;
    paths want;
  };
  const std::vector<list_case> cases = {
      {"", {}},
      {"a.pt", {"a.pt"}},  // the last line without a newline
      {"a.pt\n", {"a.pt"}},
      {"a.pt\nb.pt", {"a.pt", "b.pt"}},
      {"a.pt\r\nb.pt\r\n", {"a.pt", "b.pt"}},  // CRLF
      {"a.pt\r", {"a.pt"}},                    // a '\r' ending the last line
      {"a.pt\r\r\n", {"a.pt\r"}},              // one '\r' only
      {"\ra.pt\n", {"\ra.pt"}},
      {"#1.pt\n# 2.pt\n", {"#1.pt", "# 2.pt"}},  // no comments
      {" a.pt \n\tb.pt\t\n", {" a.pt ", "\tb.pt\t"}},
      {"   \n", {"   "}},  // a line of only spaces is a path (a file named so)
      {"\n\n\r\na.pt\n\n", {"a.pt"}},
      {"\n", {}},
      {"\r\n", {}},
  };
  for (const auto& c : cases) {
    INFO("list '" << c.text << "'");
    CHECK(parse_input_list(c.text, "list.txt", false) == c.want);
  }
}

TEST_CASE("a NUL byte in a line is refused with the list and the line number", "[input_list]") {
  struct nul_case {
    std::string text;
    const char* where;
  };
  const std::vector<nul_case> cases = {
      {"\0a.pt\n"s, "list.txt: line 1 holds a NUL byte (at byte 1 of the line)"},  // the first byte
      {"a.pt\0b.pt\n"s, "line 1 holds a NUL byte (at byte 5 of the line)"},
      {"a.pt\nb.pt\n\0"s, "line 3 holds a NUL byte (at byte 1 of the line)"},  // the last byte
      {"a.pt\n\nb\0\n"s, "line 3 holds"},                                      // empty lines count
      {"a.pt\0\r\n"s, "line 1 holds"},
      {"\0"s, "line 1 holds"},
  };
  for (const auto& c : cases) {
    INFO("case " << c.where);
    CHECK_THROWS_AS(parse_input_list(c.text, "list.txt", false), usage_error);
    CHECK_THROWS_WITH(parse_input_list(c.text, "list.txt", false),
                      Catch::Contains(c.where) && Catch::Contains("--null"));
  }
}

TEST_CASE("with --null every record is a path verbatim, empty records are skipped", "[input_list]") {
  struct list_case {
    std::string text;
    paths want;
  };
  const std::vector<list_case> cases = {
      {"", {}},
      {"a.pt\0b.pt\0"s, {"a.pt", "b.pt"}},    // find -print0: a trailing NUL
      {"a.pt\0b.pt"s, {"a.pt", "b.pt"}},      // and without one
      {"a.pt\0\0b.pt\0"s, {"a.pt", "b.pt"}},  // an empty record between two NULs
      {"\0a.pt"s, {"a.pt"}},                  // NUL the first byte
      {"\0"s, {}},
      {"\0\0"s, {}},
      {"a\nb.pt\r\n\0 c.pt \0#d\0\r\0"s, {"a\nb.pt\r\n", " c.pt ", "#d", "\r"}},
      {"a.pt\n", {"a.pt\n"}},
  };
  for (const auto& c : cases) {
    INFO("list of " << c.text.size() << " bytes");
    CHECK(parse_input_list(c.text, "-", true) == c.want);
  }
}

TEST_CASE("an empty list names itself in the error", "[input_list]") {
  input_selection s;
  s.inputs_from = "/dev/null";
  CHECK_THROWS_WITH(select_inputs(s), "no input checkpoints given: the list --inputs-from /dev/null holds no path");
  s.null_separated = true;
  CHECK_THROWS_WITH(select_inputs(s), Catch::Contains("holds no path (read NUL-separated"));
  input_selection none;
  CHECK_THROWS_WITH(select_inputs(none), Catch::Contains("name them on the command line"));
}
