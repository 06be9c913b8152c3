/*
 * Which checkpoints to fold, in which order: paths from the command line and --inputs-from
 * (a file or stdin), sorted in step order by default (natural order: digit runs compare as numbers,
 * so ckpt_2 before ckpt_10 and checkpoint-500/ before checkpoint-1000/, whatever order a shell glob
 * or a list gave), by name, by modification time, or kept as given (--sort none); --sort step orders
 * them naturally here and by each one's recorded step in fold/selection.h, which then chooses among
 * them (step ranges, --every, --last, a metric's top N). The order decides EMA, the first/latest
 * buffers, --last, --every and the running mean's bits, so step order is the default. The list may
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

enum class sort_order { none, name, natural, mtime, step };
const char* sort_order_name(sort_order s);  // "none", "name", "natural", "mtime", "step"

struct input_selection {
  std::vector<std::string> paths;
  std::string inputs_from;      // "" none, "-" stdin, else a file
  bool null_separated = false;  // --null
  sort_order sort = sort_order::natural;
};

// The paths, sorted (--sort step: naturally). Throws usage_error for a NUL byte in a line or no path
// at all, io_error for an unreadable list file, input_error for a list past kMaxInputListBytes.
std::vector<std::string> select_inputs(const input_selection& s);

// The paths of a list's text under the rules above; `list_name` is the list's name in messages.
std::vector<std::string> parse_input_list(const std::string& text, const std::string& list_name, bool null_separated);

// The list select_inputs read from stdin (--inputs-from -), as read, or nullptr. Stdin can be read
// only once: a process that hands its command line on passes it along, to be read the same way.
const std::string* stdin_inputs();

// The info line that names the fold order: "folded in natural (step) order: first A, last B".
std::string fold_order_line(const std::vector<std::string>& inputs, const std::string& order);

// Natural order: digit runs compare as numbers, leading zeros skipped (ckpt_0001 < ckpt_002 < ckpt_10);
// names equal as numbers (ckpt_01, ckpt_1) fall back to byte order, so the order is total.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace swavg
