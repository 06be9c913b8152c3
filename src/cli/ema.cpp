#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <vector>

#include "cli/commands.h"
#include "cli/fold_options.h"
#include "cli/options.h"
#include "fold/phema.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/printable.h"

namespace swavg {
namespace {

struct ema_options {
  fold_options fold;
  std::vector<std::string> decays;  // as given: several name their outputs
  std::optional<double> power_sigma_rel;
  std::vector<double> times;
};

// EDM2's power-function EMA: gamma from sigma_rel, each input's training time from --snapshot-times
// or its name (the last -<int> or _<int> group).
power_function_ema power_ema_for(double sigma_rel, const std::vector<double>& times,
                                 const std::vector<std::string>& inputs) {
  power_function_ema p;
  p.sigma_rel = sigma_rel;
  p.gamma = sigma_rel_to_gamma(sigma_rel, "--power-sigma-rel");
  if (!times.empty()) {
    p.times = times;
    return p;
  }
  for (const auto& path : inputs) {
    const auto t = parse_checkpoint_time(path);
    if (!t)
      throw usage_error(
          fmt::format("{}: no training time in the name (as in ckpt-0004096.pt or step_100.safetensors); "
                      "give --snapshot-times",
                      path));
    p.times.push_back(*t);
  }
  return p;
}

double decay_value(const std::string& text) {
  const auto d = parse_decimal(text);
  if (!d) throw usage_error(fmt::format("--decay: expected a number, got '{}'", printable(text)));
  return *d;
}

// --decay D (one output), or several: one output each from one read, -o naming them by {decay}.
void set_decays(ema_options& o) {
  if (o.decays.empty()) return;
  o.fold.job.config.decay = decay_value(o.decays.front());
  if (o.decays.size() == 1) return;
  std::vector<std::pair<std::string, double>> decays;
  for (const auto& text : o.decays) decays.emplace_back(text, decay_value(text));
  o.fold.complete = [decays](fold_job& job) {
    std::vector<output_value> values;
    for (const auto& [text, d] : decays) {
      values.push_back(output_value{text, job.config});
      values.back().config.decay = d;
    }
    set_variants(job, values, "--decay", "{decay}");
  };
}

void run_ema(ema_options o) {
  o.fold.job.config.mode = fold_mode::ema;
  set_decays(o);
  if (o.power_sigma_rel) {
    const double sigma = *o.power_sigma_rel;
    const std::vector<double> times = o.times;
    o.fold.complete = [sigma, times](fold_job& job) { job.config.power_ema = power_ema_for(sigma, times, job.inputs); };
  } else if (!o.times.empty()) {
    throw usage_error("--snapshot-times gives the times of --power-sigma-rel: add --power-sigma-rel");
  }
  run_fold_command(std::move(o.fold));
}

}  // namespace

command setup_ema(CLI::App& parent, const watch_settings* watch) {
  auto o = std::make_shared<ema_options>();
  CLI::App* app = parent.add_subcommand(
      "ema", watch ? "Fold each checkpoint of a training run, as it is written, into an exponential moving average"
                   : "Exponential moving average of checkpoints: avg.lerp(x, 1 - decay)");
  o->fold.watch = watch;
  add_fold_options(app, o->fold);
  CLI::Option* decay = app->add_option("--decay", o->decays,
                                       "Decay in [0, 1], e.g. 0.999; repeat for several outputs from one read of the "
                                       "inputs (-o with {decay}, e.g. -o ema-{decay}.pt)")
                           ->type_name("D");
  CLI::Option* power_sigma = nullptr;
  if (!watch) {
    power_sigma = app->add_option(
        "--power-sigma-rel", o->power_sigma_rel,
        "EDM2's power-function EMA of this sigma_rel in (0, 0.28) instead of --decay: beta_k = "
        "(t_{k-1}/t_k)^(gamma+1) with each checkpoint's training time t_k from its name (ckpt-0004096.pt) or "
        "--snapshot-times");
    app->add_option("--snapshot-times", o->times, "With --power-sigma-rel: each input's training time, in fold order")
        ->delimiter(',');
  }
  add_enum_option(app, "--warmup", o->fold.job.config.warmup,
                  names_of({warmup_kind::none, warmup_kind::torch_ema, warmup_kind::power}, warmup_name),
                  "none; torch_ema: min(decay, (1+n)/(10+n)); power: 1-(1+n/G)^-P clamped to [min_decay, decay]");
  const std::vector<CLI::Option*> power_options = {
      app->add_option("--inv-gamma", o->fold.job.config.inv_gamma, "G of the power warmup: finite, > 0 (default 1)"),
      app->add_option("--power", o->fold.job.config.power, "P of the power warmup: finite, > 0 (default 2/3)"),
      app->add_option("--min-decay", o->fold.job.config.min_decay,
                      "Lower bound of the power warmup's decay, in [0, --decay] (default 0)")};
  if (watch)
    app->footer(
        "Examples:\n"
        "  swavg watch ema --decay 0.999 runs/exp1/ -o ema.pt\n"
        "  swavg watch ema --decay 0.999 --decay 0.9999 out/ -o ema-{decay}.safetensors   # two averages\n"
        "  swavg watch ema --decay 0.999 ckpts/ -o ema.pt --idle-timeout 3600 --status ema.status.json");
  else
    app->footer(
        "Examples:\n"
        "  swavg ema --decay 0.999 ckpt_*.pt -o ema.pt\n"
        "  ls ckpt_* | swavg ema --decay 0.999 --sort natural --inputs-from - -o ema.pt\n"
        "  swavg ema --decay 0.999 --resume ema.pt ckpt_12.pt -o ema.pt --force\n"
        "  swavg ema --decay 0.999 --decay 0.9999 ckpt_*.pt -o ema-{decay}.pt   # two outputs, one read\n"
        "  swavg ema --power-sigma-rel 0.10 ckpt-*.pt --sort natural -o ema-0.100.pt");
  return {app, [o, power_options, decay, power_sigma] {
            const bool power = power_sigma && power_sigma->count() > 0;
            if ((decay->count() > 0) == power)
              throw usage_error(power_sigma ? "ema needs --decay D or --power-sigma-rel S (one of them)"
                                            : "swavg watch ema needs --decay D");
            if (power && o->fold.job.config.warmup != warmup_kind::none)
              throw usage_error("--warmup sets a decay schedule, which --power-sigma-rel replaces");
            for (const CLI::Option* opt : power_options)
              if (opt->count() > 0 && o->fold.job.config.warmup != warmup_kind::power)
                throw usage_error(fmt::format("{} sets the power warmup: add --warmup power", opt->get_name()));
            run_ema(*o);
          }};
}

}  // namespace swavg
