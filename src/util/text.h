/*
 * Prefix and suffix tests on text (names, paths, pickle globals): C++17 has no
 * std::string_view::starts_with, and a copy of each in every file that needs one drifts.
 */
#pragma once

#include <string_view>

namespace swavg {

bool starts_with(std::string_view s, std::string_view prefix);
bool ends_with(std::string_view s, std::string_view suffix);

}  // namespace swavg
