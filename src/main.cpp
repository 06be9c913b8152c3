#include <torch/version.h>

#include <sys/mman.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "core/input_list.h"
#include "util/error.h"
#include "util/log.h"

namespace {

constexpr const char* kHandedOver = "SWAVG_HANDED_OVER";

// The binary built without LibTorch met a job that needs it: run the same command line in
// swavg-torch, installed beside this binary. Returns only if that fails.
int hand_over(int argc, char** argv, const swavg::needs_libtorch& why) {
  using namespace swavg;
  if (std::getenv(kHandedOver) != nullptr) {  // swavg-torch itself: never loop
    spdlog::error("internal error: {}", why.what());
    return static_cast<int>(exit_code::internal);
  }
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]);
  dir = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
  const std::string full = dir + "/swavg-torch";
  spdlog::debug("{}: running {}", why.what(), full);
  // Paths already read from stdin go along in a memory file named in place of '-'.
  std::vector<std::string> args(argv, argv + argc);
  if (const auto* listed = stdin_inputs()) {
    const int fd = memfd_create("swavg-inputs", 0);
    std::string text;
    for (const auto& p : *listed) text += p + "\n";
    if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()) || lseek(fd, 0, SEEK_SET) != 0) {
      spdlog::error("{}, and the --inputs-from list cannot be passed on: {}", why.what(), errno_text(errno));
      return static_cast<int>(exit_code::io);
    }
    const std::string named = "/dev/fd/" + std::to_string(fd);
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--inputs-from=-") args[i] = "--inputs-from=" + named;
      if (args[i] == "-" && args[i - 1] == "--inputs-from") args[i] = named;
    }
  }
  std::vector<char*> pointers;
  for (auto& a : args) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  setenv(kHandedOver, "1", 1);
  execv(full.c_str(), pointers.data());
  spdlog::error("{}, and {} could not be started: {}", why.what(), full, errno_text(errno));
  return static_cast<int>(exit_code::internal);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace swavg;
  // Past a file-size limit (ulimit -f) a write fails with EFBIG, reported as an I/O error (exit 5)
  // and the temp file removed, instead of the process being killed by SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"swavg: average PyTorch checkpoints (SWA, EMA) and recompute BatchNorm statistics"};
  app.set_version_flag("--version", std::string("swavg ") + SWAVG_VERSION + " (LibTorch " + TORCH_VERSION + ")");
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
