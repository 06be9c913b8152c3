/*
 * --help as a reader wants it: `Usage: swavg ...` (the program's name, not the path it was run by),
 * each option's description wrapped to the terminal's width (or $COLUMNS, or 80) under its own
 * column, and what an option needs or excludes said in its description ("needs --inputs-from"),
 * not run into it.
 */
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace swavg {

// `text` broken at spaces into lines of at most `width` columns (a longer word stays whole), the
// lines after the first indented by `indent` columns; its own line breaks are kept.
std::string wrap_words(const std::string& text, size_t width, size_t indent);

// Names `app` "swavg" and gives it and its subcommands the wrapping formatter. Call after setup.
void use_help_format(CLI::App& app);

}  // namespace swavg
