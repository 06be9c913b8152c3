/*
 * The command line as data, read from the CLI11 definitions that parse it and print --help: the
 * visible subcommands, each option's names, what its value is (a choice among names, a number, a
 * path) and its help text. The completion scripts and the man page are generated from this, so
 * they cannot drift from --help.
 */
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace swavg {

enum class value_kind {
  none,    // a flag
  choice,  // one of `choices` (an enum option: its check's description is "{a,b,c}")
  number,  // an integer or a real (CLI11's INT, UINT, FLOAT)
  path,    // anything else: a file, a folder, or text completed as a path
};

struct option_spec {
  std::vector<std::string> names;  // "-o", "--output"; empty for a positional argument
  std::string positional;          // the positional argument's name
  value_kind kind = value_kind::none;
  std::vector<std::string> choices;
  std::string value_text;  // the value as --help names it: TEXT, INT:[1, 2147483647], {latest,first}
  std::string description;
  std::string group;  // the heading --help lists it under
  std::string default_value;
  bool required = false;
  bool repeatable = false;  // may be given more than once (or takes several positional values)
  bool global = false;      // the program's, also taken after a subcommand (-v, -q)
};

struct command_spec {
  std::string name;  // empty for the program itself
  std::string description;
  std::string footer;
  std::vector<option_spec> options;  // in --help's order: positionals first, then the options by group
};

// The options and positional arguments of `app` that --help lists.
std::vector<option_spec> options_of(CLI::App& app);

// The program (first) and each subcommand --help lists, in order.
std::vector<command_spec> commands_of(CLI::App& root);

}  // namespace swavg
