#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/fold_options.h"
#include "fold/schedule.h"
#include "fold/weight_recipes.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/printable.h"
#include "util/sha256.h"

namespace swavg {
namespace {

struct average_options {
  fold_options fold;
  std::vector<std::string> weights;  // --weights: each a comma list or a recipe (fold/weight_recipes.h)
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
  spec.sha256 = naming_option(avg_fn_option(spec.kind), [&spec] { return avg_fn_digest(spec.path); });
  fold_config& c = o.fold.job.config;
  if (c.accumulate == accumulate_policy::automatic) c.accumulate = accumulate_policy::native;
  c.avg_fn = std::move(spec);
}

std::vector<double> weight_numbers(const std::string& list, const std::string& option_text) {
  std::vector<double> out;
  size_t start = 0;
  while (true) {
    const size_t comma = list.find(',', start);
    const std::string item = list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto v = parse_decimal(item);
    if (!v)
      throw usage_error(
          fmt::format("--weights: expected a number, got '{}' in '{}'; --weights takes a comma list "
                      "of numbers or a recipe: sma, wma, wma-step, ema:DECAY, wsm:linear, wsm:cosine, "
                      "wsm:1-sqrt or wsm:W1,...,Wk",
                      printable(item), printable(option_text)));
    out.push_back(*v);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

// --weights as given: a recipe by its name, else a comma list of numbers.
std::optional<weight_recipe> parse_recipe(const std::string& text) {
  weight_recipe r;
  r.text = text;
  if (text == "sma") return r;
  if (text == "wma" || text == "wma-step") {
    r.kind = text == "wma" ? weight_recipe_kind::wma : weight_recipe_kind::wma_step;
    return r;
  }
  if (text.rfind("ema:", 0) == 0) {
    r.kind = weight_recipe_kind::ema;
    const auto d = parse_decimal(text.substr(4));
    if (!d)
      throw usage_error(fmt::format("--weights {}: expected ema:DECAY with a number, e.g. ema:0.9", printable(text)));
    r.decay = *d;
    return r;
  }
  if (text.rfind("wsm:", 0) != 0) return std::nullopt;
  r.kind = weight_recipe_kind::wsm;
  const std::string shape = text.substr(4);
  if (shape == "linear")
    r.shape = wsm_shape::linear;
  else if (shape == "cosine")
    r.shape = wsm_shape::cosine;
  else if (shape == "1-sqrt")
    r.shape = wsm_shape::one_minus_sqrt;
  else {
    r.shape = wsm_shape::given;
    r.decay_values = shape.empty() ? std::vector<double>{} : weight_numbers(shape, text);
  }
  return r;
}

// One --weights value: a list, or a recipe computed once the inputs are chosen.
struct weights_value {
  std::string text;
  std::vector<double> list;
  std::optional<weight_recipe> recipe;
};

// The configuration one --weights value gives the job (whose inputs are chosen).
fold_config weighted_config(const weights_value& w, const fold_job& job) {
  fold_config c = job.config;
  c.weights = w.recipe ? recipe_weights(*w.recipe, job.inputs.size(), job.selection.kept_steps()) : w.list;
  c.weights_recipe = w.recipe ? w.recipe->text : "";
  if (w.recipe) spdlog::info("--weights {}: {}", w.recipe->text, fmt::join(normalised_weights(c), ", "));
  return c;
}

// --weights W (one output), or several: one output each from one read, -o naming them by {weights}.
void set_weights(average_options& o) {
  std::vector<weights_value> values;
  for (const auto& text : o.weights) {
    weights_value w{text, {}, parse_recipe(text)};
    if (!w.recipe) w.list = weight_numbers(text, text);
    if (w.recipe && w.recipe->kind == weight_recipe_kind::wma_step) o.fold.choose.need_steps = true;
    values.push_back(std::move(w));
  }
  o.fold.job.config.mode = fold_mode::weighted;
  o.fold.complete = [values](fold_job& job) {
    if (values.size() == 1) {
      job.config = weighted_config(values.front(), job);
      return;
    }
    std::vector<output_value> outputs;
    for (const auto& w : values) outputs.push_back(output_value{w.text, weighted_config(w, job)});
    set_variants(job, outputs, "--weights", "{weights}");
  };
}

void run_average(average_options o) {
  if (o.fold.watch && !o.weights.empty())
    throw usage_error(
        "--weights: a weighted average's weights depend on every checkpoint (they are normalised over all of them), "
        "which a watcher has only at the end; watch with `swavg watch average` (equal weights) or `swavg watch ema`, "
        "or run `swavg average --weights ...` over the checkpoints afterwards");
  set_avg_fn(o);
  if (!o.weights.empty()) {
    set_weights(o);
  } else {
    o.fold.job.config.mode = fold_mode::swa;
  }
  run_fold_command(std::move(o.fold));
}

}  // namespace

command setup_average(CLI::App& parent, const watch_settings* watch) {
  auto o = std::make_shared<average_options>();
  CLI::App* app = parent.add_subcommand(
      "average", watch ? "Fold each checkpoint of a training run, as it is written, into an equal average (SWA)"
                       : "Average checkpoints with equal weights (SWA, bit-exact with AveragedModel) or --weights");
  o->fold.watch = watch;
  add_fold_options(app, o->fold);
  if (watch)
    app->add_option("--weights", o->weights, "Not while watching: a weighted average needs every checkpoint's weight")
        ->group("");
  else
    app->add_option(
           "--weights", o->weights,
           "One weight per input in one comma list (normalised; finite, >= 0), or a recipe: sma (equal), wma "
           "(i-th gets i, PMA), wma-step (each gets its step), ema:DECAY (the weights ema --decay gives), "
           "wsm:linear|cosine|1-sqrt or wsm:W1,...,Wk (WSM's merge weights from a decay schedule); printed and "
           "recorded. Repeat for several outputs from one read (-o with {weights}, e.g. -o avg-{weights}.pt)")
        ->type_name("W1,...|RECIPE");
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
  if (watch) {
    app->footer(
        "Examples:\n"
        "  swavg watch average runs/exp1/ -o swa.safetensors\n"
        "  swavg watch average out/ --match 'checkpoint-*' -o swa/ --idle-timeout 3600\n"
        "  swavg watch average ckpts/ --from-step 9000 --until-step 20000 -o swa.pt --status swa.status.json");
    return {app, [o] { run_average(*o); }};
  }
  app->footer(
      "Examples:\n"
      "  swavg average ckpt_*.pt -o swa.pt\n"
      "  swavg average --key model --sort natural --last 5 runs/ckpt_*.pt -o swa.safetensors\n"
      "  swavg average a.pt b.pt c.pt --weights 0.5,0.25,0.25 -o soup.pt\n"
      "  swavg average --bottom 5 --metric eval_loss out/checkpoint-*/ -o best5.safetensors\n"
      "  swavg average --sort step --from-step 9000 --weights wsm:cosine ckpts/step-*/ -o wsm/\n"
      "  swavg average --weights sma --weights wma --weights wsm:cosine ckpt_*.pt -o avg-{weights}.pt\n"
      "  swavg average --resume swa.pt ckpt_9.pt -o swa.pt --force     # fold one more in\n"
      "  swavg average --avg-fn my_avg.ts ckpt_*.pt -o avg.pt              # torch.jit.script(f).save('my_avg.ts')");
  return {app, [o] { run_average(*o); }};
}

}  // namespace swavg
