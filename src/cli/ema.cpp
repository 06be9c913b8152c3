#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <vector>

#include "cli/commands.h"
#include "cli/fold_options.h"
#include "cli/options.h"
#include "util/error.h"

namespace swavg {
namespace {

struct ema_options {
  fold_options fold;
};

void run_ema(ema_options o) {
  o.fold.job.config.mode = fold_mode::ema;
  run_fold_command(std::move(o.fold));
}

}  // namespace

command setup_ema(CLI::App& parent) {
  auto o = std::make_shared<ema_options>();
  CLI::App* app = parent.add_subcommand("ema", "Exponential moving average of checkpoints: avg.lerp(x, 1 - decay)");
  add_fold_options(app, o->fold);
  app->add_option("--decay", o->fold.job.config.decay, "Decay in [0, 1], e.g. 0.999")->required();
  add_enum_option(app, "--warmup", o->fold.job.config.warmup,
                  names_of({warmup_kind::none, warmup_kind::torch_ema, warmup_kind::power}, warmup_name),
                  "none; torch_ema: min(decay, (1+n)/(10+n)); power: 1-(1+n/G)^-P clamped to [min_decay, decay]");
  const std::vector<CLI::Option*> power_options = {
      app->add_option("--inv-gamma", o->fold.job.config.inv_gamma, "G of the power warmup: finite, > 0 (default 1)"),
      app->add_option("--power", o->fold.job.config.power, "P of the power warmup: finite, > 0 (default 2/3)"),
      app->add_option("--min-decay", o->fold.job.config.min_decay,
                      "Lower bound of the power warmup's decay, in [0, --decay] (default 0)")};
  app->footer(
      "Examples:\n"
      "  swavg ema --decay 0.999 ckpt_*.pt -o ema.pt\n"
      "  ls ckpt_* | swavg ema --decay 0.999 --sort natural --inputs-from - -o ema.pt\n"
      "  swavg ema --decay 0.999 --resume ema.pt ckpt_12.pt -o ema.pt --force");
  return {app, [o, power_options] {
            for (const CLI::Option* opt : power_options)
              if (opt->count() > 0 && o->fold.job.config.warmup != warmup_kind::power)
                throw usage_error(fmt::format("{} sets the power warmup: add --warmup power", opt->get_name()));
            run_ema(*o);
          }};
}

}  // namespace swavg
