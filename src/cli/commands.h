/*
 * Each subcommand lives in src/cli/<name>.cpp: an options struct, setup_<name>() registering the
 * subcommand and its options, run_<name>() doing the work through the library.
 */
#pragma once

#include <functional>

namespace CLI {
class App;
}

namespace swavg {

struct watch_settings;

struct command {
  CLI::App* app;
  std::function<void()> run;
};

command setup_inspect(CLI::App& parent);
command setup_convert(CLI::App& parent);
// With `watch`, the subcommand of `swavg watch` (cli/watch.cpp) that folds a run's checkpoints as
// they are written, with those settings.
command setup_average(CLI::App& parent, const watch_settings* watch = nullptr);
command setup_ema(CLI::App& parent, const watch_settings* watch = nullptr);
command setup_update_bn(CLI::App& parent);
command setup_finalize(CLI::App& parent);
command setup_posthoc_ema(CLI::App& parent);
command setup_watch(CLI::App& parent);

}  // namespace swavg
