#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/completion.h"
#include "cli/hand_over.h"
#include "cli/report.h"
#include "cli/help_format.h"
#include "cli/man_page.h"
#include "cli/options.h"
#include "util/error.h"
#include "util/log.h"
#include "util/mapped_file.h"
#include "util/printable.h"
#include "util/standard_output.h"
#include "util/version.h"

namespace {

// An input that shrank while mapped reads as zeros, and whatever error those zeros caused (a bad
// ZIP record, a mismatch), or the success they allowed, is reported as what it is: the input changed.
std::optional<int> input_changed(const char* what) {
  const auto path = swavg::mapped_file::first_faulted();
  if (!path || std::strstr(what, "changed while being read") != nullptr) return std::nullopt;
  spdlog::error("{}: changed while being read (it shrank, or a page of it could not be read)", *path);
  spdlog::debug("the error it caused: {}", what);
  return static_cast<int>(swavg::exit_code::io);
}

// Every line of an error starts `swavg: error:`, the lines after the first of a message too, so
// that a grep of a log for it finds the whole message.
void log_error(const std::string& message) {
  size_t start = 0;
  do {
    const size_t stop = std::min(message.find('\n', start), message.size());
    spdlog::error("{}", message.substr(start, stop - start));
    start = stop + 1;
  } while (start < message.size());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace swavg;
#ifndef SWAVG_WITH_LIBTORCH
  settle_openmp(argv);  // not in swavg-torch: a second start would load LibTorch twice; swavg passes it the setting
#endif
  // Past a file-size limit (ulimit -f) a write fails with EFBIG, reported as an I/O error (exit 5)
  // and the temp file removed, instead of the process being killed by SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  // Writing to a closed pipe (swavg inspect x.pt | head) fails with EPIPE, and the run ends quietly
  // with exit 0 (util/standard_output.h), instead of the process being killed before its cleanup.
  std::signal(SIGPIPE, SIG_IGN);
  buffer_stdout();
  CLI::App app{"swavg: average PyTorch checkpoints (SWA, EMA) and recompute BatchNorm statistics"};
  const std::string cuda = *SWAVG_LIBTORCH_CUDA ? fmt::format("CUDA {} compiled in", SWAVG_LIBTORCH_CUDA) : "CPU only";
  app.set_version_flag("--version",
                       *SWAVG_LIBTORCH_VERSION
                           ? fmt::format("swavg {} (LibTorch {}, {})", SWAVG_VERSION, SWAVG_LIBTORCH_VERSION, cuda)
                           : fmt::format("swavg {} (built without LibTorch, CPU only: no "
                                         "update-bn, --avg-fn or --device cuda)",
                                         SWAVG_VERSION));
  app.footer(
      "Examples:\n"
      "  swavg average ckpt_*.pt -o swa.pt\n"
      "  swavg ema --decay 0.999 ckpt_*.pt -o ema.pt\n"
      "  swavg inspect ckpt.pt\n"
      "  swavg convert ckpt.pt --key model --strip-prefix module. -o weights.safetensors\n"
      "  swavg average ckpt_*/ -o swa/ --max-shard-size 5GB\n"
      "\nExit codes: 0 ok, 1 internal error, 2 bad usage, 3 bad input file, 4 inputs disagree, 5 I/O failure,\n"
      "6 shard-parallel job not finished (finalize before every worker is done).");
  app.require_subcommand(1);
  app.fallthrough();
  int verbose = 0;
  bool quiet = false;
  app.add_flag("-v,--verbose", verbose, "More log output on stderr (-vv for trace)");
  app.add_flag("-q,--quiet", quiet, "Only errors on stderr");
  output_settings output;
  add_output_options(app, output);

  std::vector<command> commands = {setup_average(app),     setup_ema(app),       setup_inspect(app),
                                   setup_convert(app),     setup_update_bn(app), setup_finalize(app),
                                   setup_posthoc_ema(app), setup_watch(app)};
  commands.push_back(setup_completion(app));
  commands.push_back(setup_help_man(app));
  one_value_per_use(app);
  use_help_format(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version: what they print is checked too
    setup_logging(0);
    const int code = app.exit(e);
    return code != 0 ? code : finish_stdout();
  } catch (const CLI::ParseError& e) {
    // CLI11's own texts ("The following argument was not expected") become ours: one line in the
    // style of every other error, naming what to do.
    setup_logging(0, output.color);
    log_error(printable_lines(usage_message(app, e)));
    return static_cast<int>(exit_code::usage);
  }

  setup_logging(quiet ? -1 : verbose, output.color);
  configure_progress(output.progress, !quiet);
  try {
    for (const auto& c : commands)
      if (c.app->parsed()) c.run();
    if (auto changed = input_changed("")) return *changed;  // inspect: what it printed came from zeros
  } catch (const stdout_closed&) {
    return 0;  // the reader has gone (swavg ... | head -1): quietly, as Unix tools end
  } catch (const needs_libtorch& e) {
    release_reports();
    return hand_over(argc, argv, e);
  } catch (const error& e) {
    // Messages quote names from files: their control characters, direction overrides and bytes
    // that are not UTF-8 are escaped (util/printable.h). A '\n' is kept, as messages of several
    // lines are ours; a file's name with a line break in it breaks the line too.
    if (auto changed = input_changed(e.what())) return *changed;
    log_error(printable_lines(e.what()));
    emit_failure_reports(e);
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    if (auto changed = input_changed(e.what())) return *changed;
    log_error("internal error: " + printable_lines(e.what()));
    return static_cast<int>(exit_code::internal);
  }
  return finish_stdout();
}
