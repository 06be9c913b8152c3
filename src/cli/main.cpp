#include <CLI/CLI.hpp>
#include <csignal>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/hand_over.h"
#include "cli/options.h"
#include "util/error.h"
#include "util/log.h"
#include "util/version.h"

int main(int argc, char** argv) {
  using namespace swavg;
  // Past a file-size limit (ulimit -f) a write fails with EFBIG, reported as an I/O error (exit 5)
  // and the temp file removed, instead of the process being killed by SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"swavg: average PyTorch checkpoints (SWA, EMA) and recompute BatchNorm statistics"};
  app.set_version_flag("--version", fmt::format("swavg {} (LibTorch {})", SWAVG_VERSION, SWAVG_LIBTORCH_VERSION));
  app.footer(
      "Examples:\n"
      "  swavg average ckpt_*.pt -o swa.pt\n"
      "  swavg ema --decay 0.999 ckpt_*.pt -o ema.pt\n"
      "  swavg inspect ckpt.pt\n"
      "  swavg convert ckpt.pt --key model --strip-prefix module. -o weights.safetensors\n"
      "\nExit codes: 0 ok, 1 internal error, 2 bad usage, 3 bad input file, 4 inputs disagree, 5 I/O failure.");
  app.require_subcommand(1);
  app.fallthrough();
  int verbose = 0;
  bool quiet = false;
  app.add_flag("-v,--verbose", verbose, "More log output on stderr (-vv for trace)");
  app.add_flag("-q,--quiet", quiet, "Only errors on stderr");

  std::vector<command> commands = {setup_average(app), setup_ema(app), setup_inspect(app), setup_convert(app),
                                   setup_update_bn(app)};
  one_value_per_use(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return static_cast<int>(exit_code::usage);
  }

  setup_logging(quiet ? -1 : verbose);
  try {
    for (const auto& c : commands)
      if (c.app->parsed()) c.run();
  } catch (const needs_libtorch& e) {
    return hand_over(argc, argv, e);
  } catch (const error& e) {
    spdlog::error("{}", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return static_cast<int>(exit_code::internal);
  }
  return 0;
}
