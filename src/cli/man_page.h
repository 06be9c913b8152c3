/*
 * swavg(1): the man page, in roff, generated from the same CLI11 definitions that parse the
 * command line and print --help (cli/command_line.h), with the exit codes of util/error.h and the
 * environment the README documents. The build runs the hidden `swavg help-man` to write it.
 */
#pragma once

#include <string>
#include <vector>

#include "cli/command_line.h"

namespace CLI {
class App;
}

namespace swavg {

struct command;

// The page for `commands` (commands_of(root): the program first).
std::string man_page(const std::vector<command_spec>& commands);

// The hidden subcommand `help-man`, printing man_page() on stdout.
command setup_help_man(CLI::App& parent);

}  // namespace swavg
