/*
 * swavg watch average|ema RUN_DIR -o OUT: the fold subcommands' options (cli/fold_options.h, less
 * those that choose among given inputs or fold once), whose run hands the job to the watcher
 * (cli/watcher.h), and the watcher's own, which may come before or after the mode's.
 */
#include <CLI/CLI.hpp>

#include <limits>
#include <memory>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/watcher.h"
#include "util/error.h"

namespace swavg {

namespace {

void add_watch_options(CLI::App* app, watch_settings& s) {
  const std::string group = "Watching";
  app->add_option("--match", s.match, "Consider only the entries whose name matches GLOB (e.g. 'checkpoint-*')")
      ->type_name("GLOB")
      ->group(group);
  app->add_option("--poll", s.poll, "Seconds between two looks at the folder (default 1)")
      ->check(seconds_check(false))
      ->type_name("S")
      ->group(group);
  app->add_option("--settle", s.settle,
                  "Seconds a whole checkpoint must stay unchanged (sizes, times) before it is read (default 1)")
      ->check(seconds_check(true))
      ->type_name("S")
      ->group(group);
  app->add_option(
         "--stall-timeout", s.stall,
         "Seconds after which a checkpoint still unfinished and unchanged no longer holds later steps back "
         "(default 10: a sequential trainer never writes a later checkpoint while an earlier one is unfinished, so one "
         "that stopped changing is dead, and waiting on it longer would let rotation delete the later ones unfolded)")
      ->check(seconds_check(true))
      ->type_name("S")
      ->group(group);
  app->add_option("--idle-timeout", s.idle_timeout, "Stop once nothing in the folder has changed for S seconds")
      ->check(seconds_check(true))
      ->type_name("S")
      ->group(group);
  app->add_option("--until-step", s.until_step, "Stop once a checkpoint of step N or later is folded")
      ->check(integer_in(0, std::numeric_limits<int64_t>::max()))
      ->type_name("N")
      ->group(group);
  app->add_flag("--once", s.once,
                "Fold what is whole now (waiting up to twice --settle for checkpoints written in the last --settle "
                "seconds), then stop: cron jobs, scripts, a last pass after training")
      ->group(group);
  app->add_option("--status", s.status_file,
                  "The status file (JSON, replaced atomically): last step folded, seen, waiting, skipped and why, "
                  "missed, seconds behind (default: OUT.watch.json)")
      ->type_name("FILE")
      ->group(group);
  app->add_flag("--normal-priority", s.normal_priority,
                "Keep this process's CPU and I/O priority (default: nice 10 and the lowest best-effort I/O priority, "
                "beside the trainer)")
      ->group(group);
}

}  // namespace

command setup_watch(CLI::App& parent) {
  auto settings = std::make_shared<watch_settings>();
  CLI::App* app = parent.add_subcommand(
      "watch", "Fold a training run's checkpoints as they are written, before rotation deletes them (average, ema)");
  add_watch_options(app, *settings);
  app->require_subcommand(1);
  app->fallthrough();
  const command average = setup_average(*app, settings.get());
  const command ema = setup_ema(*app, settings.get());
  app->footer(
      "Each checkpoint is folded once, whole, in step order, and the output replaced atomically after each fold;\n"
      "a restarted watcher continues where it stopped. Stops on SIGINT/SIGTERM, --until-step, --idle-timeout.\n"
      "Examples:\n"
      "  swavg watch average out/ -o swa.safetensors\n"
      "  swavg watch ema --decay 0.999 runs/exp1/ -o ema.pt --idle-timeout 3600");
  return {app, [settings, average, ema] {
            if (average.app->parsed())
              average.run();
            else
              ema.run();
          }};
}

}  // namespace swavg
