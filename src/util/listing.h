/*
 * Lists in messages: the first items, then "... (N in all)", so that a message about a million
 * tensors stays a screen long; the whole list goes where the user asked for it (--report). The one
 * list formatter of swavg's messages: inline (quoted_list) or a line an item (listed_lines).
 */
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace swavg {

constexpr size_t kMaxListedItems = 20;       // items a message lists before "... (N in all)"
constexpr size_t kMaxListedItemBytes = 200;  // bytes of one listed item before "..."

// `text` itself, or its first bytes (at most `max_bytes`, ending between UTF-8 characters) and "...".
std::string cut_text(std::string_view text, size_t max_bytes = kMaxListedItemBytes);

// "'a', 'b', ... (N in all)": the first `max` items, each quoted, cut (cut_text) and made printable
// (util/printable.h: a name from a file cannot break the message apart); "none" for no items.
std::string quoted_list(const std::vector<std::string>& items, size_t max = kMaxListedItems);

// Each of the first `max` items on its own line after `indent` ("\n  a\n  b"), then
// "\n  ... (N in all)" when there were more.
std::string listed_lines(const std::vector<std::string>& items, size_t max, const std::string& indent = "  ");

}  // namespace swavg
