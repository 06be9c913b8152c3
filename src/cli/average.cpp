#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/fold_options.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/sha256.h"

namespace swavg {
namespace {

struct average_options {
  fold_options fold;
  std::vector<double> weights;
  std::string avg_fn;
  std::string multi_avg_fn;
};

// The most bytes an averaging function's file may hold (a scripted function is a few KiB).
constexpr uint64_t kMaxAvgFnBytes = uint64_t{64} << 20;

// The function file's sha256: a regular file (a FIFO or a device is refused before it is read, so
// neither hangs) of at most kMaxAvgFnBytes.
std::string avg_fn_digest(const std::string& path) {
  const auto file = mapped_file::open(path);
  if (file->size() > kMaxAvgFnBytes)
    throw input_error(fmt::format("{}: {} bytes, more than the {} bytes an averaging function may hold", path,
                                  file->size(), kMaxAvgFnBytes));
  sha256 h;
  h.update(file->data(), file->size());
  file->throw_if_faulted();
  return h.hex_digest();
}

// --avg-fn / --multi-avg-fn: a program, so the job goes to swavg-torch before anything is read;
// there the file is named by its digest (for --resume) and the function runs in native precision
// unless --accumulate says otherwise.
void set_avg_fn(average_options& o) {
  if (!o.avg_fn.empty() && !o.multi_avg_fn.empty())
    throw usage_error("--avg-fn and --multi-avg-fn are two forms of one averaging function: give one of them");
  if (o.avg_fn.empty() && o.multi_avg_fn.empty()) return;
  avg_fn_spec spec;
  spec.kind = o.avg_fn.empty() ? avg_fn_kind::multi_avg_fn : avg_fn_kind::avg_fn;
  spec.path = o.avg_fn.empty() ? o.multi_avg_fn : o.avg_fn;
  if (!o.weights.empty())
    throw usage_error(fmt::format("{} replaces the equal-weight average: it cannot be combined with --weights",
                                  avg_fn_option(spec.kind)));
  require_libtorch(fmt::format("{} {} (a TorchScript function)", avg_fn_option(spec.kind), spec.path));
  try {
    spec.sha256 = avg_fn_digest(spec.path);
  } catch (const io_error& e) {
    throw io_error(fmt::format("{} {}", avg_fn_option(spec.kind), e.what()));
  } catch (const input_error& e) {
    throw input_error(fmt::format("{} {}", avg_fn_option(spec.kind), e.what()));
  }
  fold_config& c = o.fold.job.config;
  if (c.accumulate == accumulate_policy::automatic) c.accumulate = accumulate_policy::native;
  c.avg_fn = std::move(spec);
}

void run_average(average_options o) {
  set_avg_fn(o);
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
  const std::string fn = "Custom averaging function (TorchScript: it runs, in swavg-torch)";
  app->add_option("--avg-fn", o->avg_fn,
                  "AveragedModel's avg_fn: torch.jit.script(f).save(FILE) of f(averaged: Tensor, current: Tensor, "
                  "num_averaged: Tensor) -> Tensor (or a scripted module with that forward); called per tensor and "
                  "checkpoint after the first, in the tensors' own dtype; one tensor's average in memory at a time")
      ->type_name("FILE")
      ->group(fn);
  app->add_option("--multi-avg-fn", o->multi_avg_fn,
                  "PyTorch 2.x's multi_avg_fn: a scripted module whose forward(averaged: List[Tensor], current: "
                  "List[Tensor], num_averaged: Tensor) -> None updates averaged in place; called once per checkpoint "
                  "after the first with every averaged floating tensor in state-dict order (then once with the "
                  "integer ones, if any). Holds the whole average in memory (the model's size in the accumulator "
                  "dtype)")
      ->type_name("FILE")
      ->group(fn);
  app->footer(
      "Examples:\n"
      "  swavg average ckpt_*.pt -o swa.pt\n"
      "  swavg average --key model --sort natural --last 5 runs/ckpt_*.pt -o swa.safetensors\n"
      "  swavg average a.pt b.pt c.pt --weights 0.5,0.25,0.25 -o soup.pt\n"
      "  swavg average --resume swa.pt ckpt_9.pt -o swa.pt --force     # fold one more in\n"
      "  swavg average --avg-fn my_avg.ts ckpt_*.pt -o avg.pt              # torch.jit.script(f).save('my_avg.ts')");
  return {app, [o] { run_average(*o); }};
}

}  // namespace swavg
