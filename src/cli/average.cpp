#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/fold_options.h"
#include "util/error.h"

namespace swavg {
namespace {

struct average_options {
  fold_options fold;
  std::vector<double> weights;
};

void run_average(average_options o) {
  if (!o.weights.empty()) {
    o.fold.job.config.mode = fold_mode::weighted;
    o.fold.job.config.weights = o.weights;
  } else {
    o.fold.job.config.mode = fold_mode::swa;
  }
  run_fold_command(std::move(o.fold));
}

}  // namespace

command setup_average(CLI::App& parent) {
  auto o = std::make_shared<average_options>();
  CLI::App* app = parent.add_subcommand(
      "average", "Average checkpoints with equal weights (SWA, bit-exact with AveragedModel) or --weights");
  add_fold_options(app, o->fold);
  app->add_option("--weights", o->weights, "One weight per input in one comma list (normalised; finite, >= 0)")
      ->delimiter(',');
  app->footer(
      "Examples:\n"
      "  swavg average ckpt_*.pt -o swa.pt\n"
      "  swavg average --key model --sort natural --last 5 runs/ckpt_*.pt -o swa.safetensors\n"
      "  swavg average a.pt b.pt c.pt --weights 0.5,0.25,0.25 -o soup.pt\n"
      "  swavg average --resume swa.pt ckpt_9.pt -o swa.pt --force     # fold one more in");
  return {app, [o] { run_average(*o); }};
}

}  // namespace swavg
