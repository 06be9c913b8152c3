/*
 * util/paths: the file-system vocabulary every layer names files with. Edge cases of the joins and
 * trims (an empty folder, ".", trailing slashes, the root) and of what a path names (a symlink is
 * followed, a missing path is neither a file nor a folder).
 */
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "support.h"
#include "util/paths.h"

using namespace swavg;
using namespace swavg::test;

TEST_CASE("path_in_folder puts one slash between, and none for the working folder", "[paths][unit]") {
  CHECK(path_in_folder("c0", "x") == "c0/x");
  CHECK(path_in_folder("c0/", "x") == "c0/x");
  CHECK(path_in_folder("/", "x") == "/x");
  CHECK(path_in_folder("/a/b", "x") == "/a/b/x");
  CHECK(path_in_folder("", "x") == "x");  // never "/x": an empty folder is not the root
  CHECK(path_in_folder(".", "x") == "x");
  CHECK(path_in_folder("./", "x") == "./x");
}

TEST_CASE("parent_dir and base_name split a path, and path_in_folder joins it back", "[paths][unit]") {
  CHECK(parent_dir("x") == ".");
  CHECK(parent_dir("/x") == "/");
  CHECK(parent_dir("a/b/x") == "a/b");
  CHECK(parent_dir("a/") == "a");
  CHECK(base_name("a/b/x") == "x");
  CHECK(base_name("x") == "x");
  CHECK(base_name("a/") == "");
  for (const std::string p : {"x", "/x", "a/x", "/a/b/x"}) CHECK(path_in_folder(parent_dir(p), base_name(p)) == p);
}

TEST_CASE("without_trailing_slash drops slashes and '.' parts and keeps the root", "[paths][unit]") {
  CHECK(without_trailing_slash("out") == "out");
  CHECK(without_trailing_slash("out/") == "out");
  CHECK(without_trailing_slash("out//") == "out");
  CHECK(without_trailing_slash("out/./.") == "out");
  CHECK(without_trailing_slash("/") == "/");
  CHECK(without_trailing_slash("//") == "/");
  CHECK(without_trailing_slash("") == "");
  temp_dir d;
  REQUIRE(::mkdir((d / "sub").c_str(), 0755) == 0);
  CHECK(without_trailing_slash(d / "sub/..") == real_path(d.path()));  // named by where it sits: resolved
}

TEST_CASE("is_regular_file and is_folder follow symbolic links", "[paths][unit]") {
  temp_dir d;
  std::ofstream(d / "file") << "x";
  REQUIRE(::mkdir((d / "folder").c_str(), 0755) == 0);
  REQUIRE(::symlink((d / "file").c_str(), (d / "to_file").c_str()) == 0);
  REQUIRE(::symlink((d / "folder").c_str(), (d / "to_folder").c_str()) == 0);
  REQUIRE(::symlink((d / "gone").c_str(), (d / "dangling").c_str()) == 0);
  CHECK(is_regular_file(d / "file"));
  CHECK(is_regular_file(d / "to_file"));
  CHECK_FALSE(is_regular_file(d / "folder"));
  CHECK(is_folder(d / "folder"));
  CHECK(is_folder(d / "to_folder"));
  CHECK(is_folder(d / "folder/"));
  CHECK_FALSE(is_folder(d / "file"));
  for (const std::string missing : {d / "gone", d / "dangling", std::string()}) {
    CHECK_FALSE(is_regular_file(missing));
    CHECK_FALSE(is_folder(missing));
  }
}
