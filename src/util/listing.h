/*
 * Lists in messages: the first items, then "... (N in all)", so that a message about a million
 * tensors stays a screen long; the whole list goes where the user asked for it (--report).
 */
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace swavg {

// Each of the first `max` items on its own line after `indent` ("\n  a\n  b"), then
// "\n  ... (N in all)" when there were more.
std::string listed_lines(const std::vector<std::string>& items, size_t max, const std::string& indent = "  ");

}  // namespace swavg
