/*
 * Every write to stdout (reports, --json, the dry-run plan, --help, --version, the completion
 * scripts, the man page, inspect) is checked, one way: a failed write (a full device, a closed file)
 * is an I/O error (exit 5) naming stdout; a reader that went away (EPIPE: `swavg ... | head -1`)
 * ends the run quietly with exit 0, as Unix tools do (SIGPIPE is ignored, so the write fails
 * instead of killing the process before its cleanup).
 */
#pragma once

#include <exception>
#include <string>
#include <string_view>

namespace swavg {

// Thrown when stdout's reader has gone: main() ends with exit 0, saying nothing.
struct stdout_closed : std::exception {
  const char* what() const noexcept override { return "stdout: the reader closed the pipe"; }
};

// Writes `text` to stdout and flushes it. io_error "stdout: cannot write <what>: <reason>" when it
// fails; stdout_closed when its reader has gone.
void write_stdout(std::string_view text, const std::string& what);

// Called first in main(): stdout, unless a terminal, gathers up to 1 MiB before its first write, and
// std::cout writes through stdio (in order with printf) keeping the errno of a failed write, so that
// finish_stdout() names the failure of whatever printed (CLI11's --help, the man page, inspect).
void buffer_stdout();

// At exit: flushes what is still buffered for stdout (std::cout and stdio). 0 when it is written or
// the reader has gone, else logs "stdout: write failed: <reason>" and returns exit 5.
int finish_stdout();

}  // namespace swavg
