/*
 * Errors carry the process exit code with them. They are thrown anywhere in the library and caught
 * only in main(), which prints the message and exits with the code. The codes are documented in the
 * README and are part of the CLI contract.
 */
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace swavg {

enum class exit_code : int {
  ok = 0,
  internal = 1,    // a bug or an unexpected failure
  usage = 2,       // bad command line
  bad_input = 3,   // an input file is malformed, unsupported or unsafe
  mismatch = 4,    // inputs disagree with each other (names, shapes, dtypes)
  io = 5,          // cannot read or write a file (missing, permissions, disk full)
  incomplete = 6,  // a shard-parallel job is not finished: finalize before every worker wrote its part
};

class error : public std::runtime_error {
 public:
  error(exit_code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  exit_code code() const { return code_; }
  // The whole list a message cuts short ("... (N in all)"), for the failure's --report.
  const std::vector<std::string>& details() const { return details_; }
  void set_details(std::vector<std::string> details) { details_ = std::move(details); }

 private:
  exit_code code_;
  std::vector<std::string> details_;
};

struct usage_error : error {
  explicit usage_error(const std::string& m) : error(exit_code::usage, m) {}
};
struct input_error : error {
  explicit input_error(const std::string& m) : error(exit_code::bad_input, m) {}
};
struct mismatch_error : error {
  explicit mismatch_error(const std::string& m) : error(exit_code::mismatch, m) {}
};
struct io_error : error {
  explicit io_error(const std::string& m) : error(exit_code::io, m) {}
};
struct incomplete_error : error {
  explicit incomplete_error(const std::string& m) : error(exit_code::incomplete, m) {}
};

// This build of swavg runs without LibTorch and the job needs it (update-bn, a GPU, a
// dtype the built-in kernels do not cover). main() hands the same command line to swavg-torch.
struct needs_libtorch : error {
  explicit needs_libtorch(const std::string& why)
      : error(exit_code::internal, why + " needs LibTorch, which this swavg binary does not load") {}
};

// Throws needs_libtorch(why) in the binary built without LibTorch; nothing in the one with it.
// Seam: defined in src/libtorch/require_libtorch.cpp, stand-in in src/libtorch/without_libtorch.cpp.
void require_libtorch(const std::string& why);

// Throws input_error(message) unless cond holds.
inline void check_input(bool cond, const std::string& message) {
  if (!cond) throw input_error(message);
}

// `read()`'s result; a file it cannot read (io_error) or finds malformed (input_error) is rethrown as
// the same kind with `option` before the message, so that the message names the option that gave
// the file ("--metric-file m.csv: line 2: ...").
template <class F>
auto naming_option(const std::string& option, F&& read) -> decltype(read()) {
  try {
    return read();
  } catch (const io_error& e) {
    throw io_error(option + " " + e.what());
  } catch (const input_error& e) {
    throw input_error(option + " " + e.what());
  }
}

// The text of errno for messages ("No such file or directory").
std::string errno_text(int err);

}  // namespace swavg
