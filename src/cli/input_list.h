/*
 * Which checkpoints to fold, in which order: paths from the command line and --inputs-from
 * (a file or stdin, one path per line), sorted by name, natural order (ckpt_2 before ckpt_10) or
 * modification time, then thinned with --every K (the K-th, 2K-th, ... are kept) and cut to the
 * --last N. The list may be a regular file, a pipe (bash's `<(...)`) or stdin
 * (`-`), read up to kMaxInputListBytes.
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
  std::string inputs_from;  // "" none, "-" stdin, else a file
  sort_order sort = sort_order::none;
  int last = 0;  // 0: all (not set); --last takes N >= 1
  int every = 1;
};

// Throws usage_error for bad options or an empty result, io_error for an unreadable list file,
// input_error for a list past kMaxInputListBytes.
std::vector<std::string> select_inputs(const input_selection& s);

// The paths select_inputs read from stdin (--inputs-from -), or nullptr. Stdin can be read only
// once: a process that hands its command line on passes these along.
const std::vector<std::string>* stdin_inputs();

// Natural order: digit runs compare as numbers.
bool natural_less(const std::string& a, const std::string& b);

}  // namespace swavg
