/*
 * `swavg completion bash|zsh|fish`: a completion script for the shell, generated from the same
 * CLI11 definitions that parse the command line and print --help (cli/command_line.h): the
 * subcommands, each one's options, the names an enum option takes, paths for file arguments.
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

enum class shell { bash, zsh, fish };
const char* shell_name(shell s);

// The script for `s`, completing `commands` (commands_of(root): the program first).
std::string completion_script(shell s, const std::vector<command_spec>& commands);

command setup_completion(CLI::App& parent);

}  // namespace swavg
