/*
 * Which checkpoints to fold, in which order: paths from the command line and --inputs-from
 * (a file or stdin), sorted by name, natural order (ckpt_2 before ckpt_10) or modification time,
 * then thinned with --every K (the K-th, 2K-th, ... are kept) and cut to the --last N. The list may
 * be a regular file, a pipe (bash's `<(...)`) or stdin (`-`), read up to kMaxInputListBytes.
 *
 * A list holds one path per line, byte for byte: a line ends at '\n', and one '\r' before it (or at
 * the end of the last line) is dropped, so lists written on Windows read the same; nothing else is
 * trimmed and no character is special, so `#1.pt` and ` a.pt ` are paths. Empty lines are skipped.
 * A NUL byte, which no path can hold, is refused with its line number. With --null the list is
 * NUL-separated (find -print0, as tar --null -T and xargs -0 read it): every record is a path
 * verbatim (newlines, '\r' and spaces included), empty records are skipped, the last NUL optional.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace swavg {

inline constexpr uint64_t kMaxInputListBytes = uint64_t{64} << 20;

enum class sort_order { none, name, natural, mtime };

struct input_selection {
  std::vector<std::string> paths;
  std::string inputs_from;      // "" none, "-" stdin, else a file
  bool null_separated = false;  // --null
  sort_order sort = sort_order::none;
  int last = 0;  // 0: all (not set); --last takes N >= 1
  int every = 1;
};

// Throws usage_error for bad options, a NUL byte in a line or an empty result, io_error for an
// unreadable list file, input_error for a list past kMaxInputListBytes.
std::vector<std::string> select_inputs(const input_selection& s);

// The paths of a list's text under the rules above; `list_name` is the list's name in messages.
std::vector<std::string> parse_input_list(const std::string& text, const std::string& list_name, bool null_separated);

// The list select_inputs read from stdin (--inputs-from -), as read, or nullptr. Stdin can be read
// only once: a process that hands its command line on passes it along, to be read the same way.
const std::string* stdin_inputs();

// Natural order: digit runs compare as numbers.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace swavg
