/*
 * Strings from files, made safe to print: names in a checkpoint (tensor names, keys, class names)
 * can hold terminal escape sequences, carriage returns or Unicode direction overrides that hide or
 * reorder what a reader sees, and bytes that are not UTF-8 (which JSON cannot hold).
 *
 * printable() keeps printable UTF-8 as is and writes everything else as an escape:
 *   \\ for a backslash (so that the escaped form is unambiguous), \n \r \t,
 *   \xHH for other C0 controls, DEL and each byte that is not part of valid UTF-8,
 *   \uHHHH for C1 controls (U+0080-U+009F), the direction marks and overrides U+061C, U+200E,
 *   U+200F, U+202A-U+202E, U+2066-U+2069, and the separators U+2028, U+2029.
 * The result is valid UTF-8 without control characters, for text output and JSON alike.
 * printable_lines() does the same but keeps '\n' and '\\' as they are, for messages (prose of
 * several lines, where a backslash need not be told apart from an escape).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace swavg {

std::string printable(std::string_view s);
std::string printable_lines(std::string_view s);

// The length of the valid UTF-8 sequence at s[i] and its code point, or 0 when it is not valid
// (overlong forms, values past U+10FFFF and, unless allowed, surrogates).
size_t utf8_sequence(std::string_view s, size_t i, uint32_t& cp, bool allow_surrogates = false);
// The offset of the first byte that does not start a valid sequence, or nullopt when all of `s` is
// valid UTF-8 (RFC 3629; surrogates only when allowed).
std::optional<size_t> invalid_utf8_at(std::string_view s, bool allow_surrogates = false);
inline bool valid_utf8(std::string_view s, bool allow_surrogates = false) {
  return !invalid_utf8_at(s, allow_surrogates);
}

}  // namespace swavg
