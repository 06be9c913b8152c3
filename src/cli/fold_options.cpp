#include "cli/fold_options.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "cli/dry_run.h"
#include "cli/load_options.h"
#include "cli/options.h"
#include "formats/file/save.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace swavg {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
constexpr int64_t kMaxInt64 = std::numeric_limits<int64_t>::max();

// Which of the inputs to fold and in which order (cli/input_list.h, fold/selection.h).
void add_selection_options(CLI::App* app, fold_options& o) {
  const std::string group = "Choosing checkpoints (in this order: sort, steps, --every, --last, --top)";
  add_enum_option(app, "--sort", o.selection.sort,
                  {{"none", sort_order::none},
                   {"name", sort_order::name},
                   {"natural", sort_order::natural},
                   {"mtime", sort_order::mtime},
                   {"step", sort_order::step}},
                  "Fold order: natural (the default: step order, digit runs compared as numbers, so ckpt_2 before "
                  "ckpt_10 and checkpoint-500 before checkpoint-1000), name (as text), mtime, none (as given), or "
                  "step (the step each checkpoint records: trainer_state.json, global_step, or its name)")
      ->group(group);
  app->add_option("--from-step", o.choose.from_step, "Keep the checkpoints whose step is at least A")
      ->check(integer_in(0, kMaxInt64))
      ->type_name("A")
      ->group(group);
  app->add_option("--to-step", o.choose.to_step,
                  "Keep the checkpoints whose step is at most B (fairseq's "
                  "--checkpoint-upper-bound)")
      ->check(integer_in(0, kMaxInt64))
      ->type_name("B")
      ->group(group);
  app->add_option("--every", o.choose.every, "Keep every K-th input: the K-th, 2K-th, ... (after sorting)")
      ->check(integer_in(1, kMaxInt))
      ->group(group);
  app->add_option("--last", o.choose.last, "Keep only the last N inputs (after sorting): the latest N")
      ->check(integer_in(1, kMaxInt))
      ->group(group);
  CLI::Option* top = app->add_option("--top", o.top, "Keep the N checkpoints with the highest --metric (e.g. accuracy)")
                         ->check(integer_in(1, kMaxInt))
                         ->group(group);
  CLI::Option* bottom =
      app->add_option("--bottom", o.bottom, "Keep the N checkpoints with the lowest --metric (e.g. eval_loss)")
          ->check(integer_in(1, kMaxInt))
          ->group(group);
  top->excludes(bottom);
  app->add_option("--metric", o.choose.metric,
                  "The metric --top/--bottom rank by, as the trainer logged it: trainer_state.json's log_history "
                  "(eval_loss), a torch.save entry (timm's metric), Lightning's monitor (val_loss); folded in step "
                  "order, ties keep the earlier")
      ->type_name("NAME")
      ->group(group);
  app->add_option("--metric-file", o.choose.metric_file,
                  "Read --metric from FILE instead: CSV with 'step' and NAME columns (Lightning's metrics.csv), or "
                  "JSON (a trainer_state.json, [{\"step\": S, NAME: V}], {\"S\": V}), by each checkpoint's step")
      ->type_name("FILE")
      ->group(group);
}

// The inputs: checkpoints given, or, for `swavg watch`, the run's folder.
void add_input_options(CLI::App* app, fold_options& o) {
  if (o.watch) {
    app->add_option("run", o.selection.paths,
                    "The training run's folder to watch: each checkpoint written into it (a file or a folder) is "
                    "folded once whole, in step order")
        ->required()
        ->expected(1)
        ->type_name("RUN_DIR");
    const std::string group = "Choosing checkpoints";
    app->add_option("--from-step", o.choose.from_step, "Fold the checkpoints whose step is at least A")
        ->check(integer_in(0, kMaxInt64))
        ->type_name("A")
        ->group(group);
    app->add_option("--to-step", o.choose.to_step, "Fold the checkpoints whose step is at most B")
        ->check(integer_in(0, kMaxInt64))
        ->type_name("B")
        ->group(group);
    return;
  }
  app->add_option("inputs", o.selection.paths,
                  "Checkpoints to fold (any format swavg reads), folded in step order: see --sort");
  CLI::Option* inputs_from =
      app->add_option("--inputs-from", o.selection.inputs_from,
                      "Read more input paths from FILE ('-': stdin), one per line, byte for byte: only the line's "
                      "end (\\n or \\r\\n) is removed, no spaces are trimmed, '#' is not special, empty lines are "
                      "skipped and a NUL byte is refused");
  app->add_flag("--null", o.selection.null_separated,
                "The --inputs-from list is NUL-separated (find -print0): each record is a path verbatim, empty "
                "records skipped")
      ->needs(inputs_from);
  add_selection_options(app, o);
}

// --update-bn and its data (not for `swavg watch`: recompute once, on the final average).
void add_update_bn_options(CLI::App* app, fold_options& o) {
  const std::string bn = "BatchNorm recomputation (--update-bn)";
  app->add_flag("--update-bn", o.update_bn,
                "Recompute BatchNorm statistics of the average by replaying --data through --model (as update_bn)")
      ->group(bn);
  app->add_option("--data", o.bn.data.path,
                  "Samples to replay: .npy, torch.save'd tensor, safetensors or raw (--shape)")
      ->group(bn);
  app->add_option("--data-key", o.bn.data.key, "Entry holding the input tensor in a torch.save or safetensors file")
      ->group(bn);
  app->add_option("--shape", o.bn.data.shape, "Raw data: the shape of one sample, e.g. 3,32,32")
      ->delimiter(',')
      ->check(integer_in(1, kMaxInt64))
      ->group(bn);
  add_dtype_option(app, "--dtype", o.bn.data.type, /*floating_only=*/false, "Raw data: element type (default float32)")
      ->group(bn);
  app->add_option("--batch-size", o.bn.options.batch_size, "Samples per batch, as your DataLoader's batch_size")
      ->capture_default_str()
      ->check(integer_in(1, kMaxInt64))
      ->group(bn);
  app->add_flag("--drop-last", o.bn.options.drop_last, "Drop the last partial batch")->group(bn);
  app->add_option("--max-batches", o.bn.options.max_batches, "Replay at most N batches (default: all)")
      ->check(integer_in(1, kMaxInt64))
      ->group(bn);
  add_dtype_option(app, "--input-dtype", o.bn.options.input_type, /*floating_only=*/false,
                   "Feed the model this dtype (default: the model's floating dtype)")
      ->group(bn);
}

}  // namespace

void add_fold_options(CLI::App* app, fold_options& o) {
  fold_config& c = o.job.config;
  add_input_options(app, o);
  app->add_option("-o,--output", o.job.output,
                  "File to write (atomically), or a folder (DIR/, or an existing folder): a Hugging Face folder of "
                  "shards and an index")
      ->required();
  const std::string sharded = "Sharded outputs (-o DIR/)";
  app->add_option("--max-shard-size", o.max_shard_size,
                  "Largest shard: 5GB, 500MB, 2MiB or bytes (KB/MB/GB/TB are powers of 10; default 5GB)")
      ->group(sharded);
  if (!o.watch) {
    app->add_option("--shard", o.shard,
                    "Write only worker I's shards of N (0 <= I < N) into DIR.partial/; then `swavg finalize DIR/`. "
                    "Without it: SLURM_ARRAY_TASK_ID, SLURM_PROCID, RANK or JOB_COMPLETION_INDEX")
        ->group(sharded);
    app->add_option("--shard-count", o.shard_count, "The worker count N with JOB_COMPLETION_INDEX (Kubernetes)")
        ->group(sharded);
  }
  add_format_option(app, o.job.format);
  if (!o.watch) app->add_flag("--force", o.job.force, "Replace an existing output");
  app->add_flag("--drop-objects", o.job.drop_objects,
                "Leave the non-tensor entries (_extra_state, epoch, ...) out of the output instead of carrying them "
                "(needed for safetensors outputs of inputs that have them)");
  add_load_options(app, o.job.load);
  add_enum_option(app, "--buffers", c.buffers,
                  names_of({buffer_policy::latest, buffer_policy::first, buffer_policy::average}, buffer_policy_name),
                  "Buffers: latest (the last input's: use_buffers=False in PyTorch 2.x), first (the first input's: "
                  "use_buffers=False in 1.13) or average (use_buffers=True, integer buffers included)");
  app->add_option("--buffer", c.buffer_patterns, "Also treat tensors matching REGEX (RE2, searched) as buffers");
  app->add_option("--model", o.job.model, "TorchScript model whose parameter/buffer split decides what is a buffer");
  add_enum_option(app, "--int", c.ints,
                  {{"latest", int_policy::latest}, {"first", int_policy::first}, {"error", int_policy::error}},
                  "Integer and bool tensors: latest, first, or error when they differ");
  app->add_option("--rules", o.rules_file,
                  "JSON list of {\"match\": REGEX (RE2), \"action\": average|latest|first|drop, \"decay\": D}");
  add_enum_option(app, "--accumulate", c.accumulate,
                  {{"auto", accumulate_policy::automatic},
                   {"native", accumulate_policy::native},
                   {"float32", accumulate_policy::float32},
                   {"float64", accumulate_policy::float64}},
                  "Accumulator precision: auto (float32 for float16/bfloat16, else native; with --avg-fn or "
                  "--multi-avg-fn always native: the function runs in the tensors' own dtype), native, float32, "
                  "float64");
  add_dtype_option(app, "--output-dtype", c.output_dtype, /*floating_only=*/true,
                   "Write floating tensors in this dtype (default: each input's)");
  if (!o.watch) app->add_option("--resume", o.job.resume, "Continue from an earlier output of the same mode");
  add_enum_option(app, "--layout", c.layout,
                  names_of({output_layout::state_dict, output_layout::averaged_model}, layout_name),
                  "state-dict (the inputs' names) or averaged-model (module.<name> + n_averaged)");
  app->add_flag("--allow-missing", c.allow_missing, "Average each tensor over the inputs that have it");
  app->add_flag("--allow-nonfinite", c.allow_nonfinite, "Accept NaN and Inf values in the inputs");
  add_device_option(app, "--device", c.device, "Fold on cpu or cuda[:N]");
  if (o.watch) {
    app->add_option("--report", o.report_file, "Write the JSON report of each fold to FILE, replacing the last one");
    return;
  }
  app->add_option("--report", o.report_file, "Write a JSON report to FILE");
  app->add_flag("--json", o.json, "Print the JSON report on stdout (with --dry-run: the plan)");
  app->add_flag("--dry-run", o.dry_run,
                "Check everything and print the plan (inputs, every tensor's action, output files and sizes, bytes "
                "and peak memory) instead of folding; writes nothing");
  add_update_bn_options(app, o);
}

void set_variants(fold_job& job, const std::vector<output_value>& values, const std::string& option,
                  const std::string& placeholder) {
  std::vector<std::string> labels;
  for (const auto& v : values) labels.push_back(v.label);
  const std::vector<std::string> outputs = outputs_for(job.output, placeholder, option, labels);
  const std::string many =
      fmt::format("{} {} values write {} outputs from one read", values.size(), option, values.size());
  if (job.directory) throw usage_error(many + ", each one file: -o DIR/ writes one folder");
  if (!job.resume.empty()) throw usage_error(many + ": --resume continues one average; give one value");
  if (job.config.avg_fn) throw usage_error(many + ": an averaging function writes one output");
  job.variants.clear();
  for (size_t v = 0; v < values.size(); ++v)
    job.variants.push_back(fold_variant{values[v].label, outputs[v], values[v].config});
  job.output = job.variants.front().output;
  job.config = job.variants.front().config;
}

namespace {

// The inputs gathered, sorted and chosen (fold/selection.h); the choice is logged and kept for the
// report and the resume record.
void choose_inputs(fold_options& o) {
  selection_config& c = o.choose;
  c.sort_by_step = o.selection.sort == sort_order::step;
  if (o.top > 0) {
    c.rank = metric_rank::top;
    c.rank_count = o.top;
  } else if (o.bottom > 0) {
    c.rank = metric_rank::bottom;
    c.rank_count = o.bottom;
  }
  o.job.selection = select_checkpoints(select_inputs(o.selection), c);
  o.job.inputs = o.job.selection.kept();
  o.job.order = sort_order_name(o.selection.sort);
  if (!c.metric_file.empty()) o.job.also_read.push_back(c.metric_file);
  const bool read_facts = std::any_of(o.job.selection.candidates.begin(), o.job.selection.candidates.end(),
                                      [](const selection_candidate& s) { return s.step || s.metric; });
  if (!o.job.selection.chooses() && !read_facts) return;
  o.job.config.selection = selection_object(o.job.selection);
  for (const auto& line : selection_lines(o.job.selection)) spdlog::debug("{}", line);
  if (o.job.selection.chooses())
    spdlog::info("chose {} of {} checkpoints{}", o.job.inputs.size(), o.job.selection.candidates.size(),
                 c.rank == metric_rank::none
                     ? std::string()
                     : fmt::format(" ({} {} by {})", metric_rank_option(c.rank), c.rank_count, c.metric));
}

void add_rules(fold_options& o) {
  if (o.rules_file.empty()) return;
  o.job.config.rules = load_rules(o.rules_file);
  o.job.also_read.push_back(o.rules_file);
}

// `swavg watch average|ema`: the run's folder is the one input; one worker (a Slurm or Kubernetes
// rank around it is not a shard of its output).
void run_watch_command(fold_options o) {
  check_selection_config(o.choose);
  o.job.inputs = o.selection.paths;
  add_rules(o);
  if (o.complete) o.complete(o.job);
  watch_settings s = *o.watch;
  s.from_step = o.choose.from_step;
  s.to_step = o.choose.to_step;
  run_watcher(o.job, s, o.report_file);
}

}  // namespace

void run_fold_command(fold_options o) {
  o.job.directory = is_directory_output(o.job.output);
  if (!o.max_shard_size.empty()) {
    if (!o.job.directory)
      throw usage_error(
          fmt::format("--max-shard-size needs a folder output (-o DIR/, with the slash), not '{}'", o.job.output));
    o.job.max_shard_size = parse_shard_size(o.max_shard_size);
    if (o.job.format) refuse_shard_size(o.job.output, *o.job.format);
  }
  if (o.watch) return run_watch_command(std::move(o));
  o.job.worker = resolve_worker(o.shard, o.shard_count, o.job.directory, [](const char* n) { return std::getenv(n); });
  choose_inputs(o);
  add_rules(o);
  if (!o.selection.inputs_from.empty() && o.selection.inputs_from != "-")
    o.job.also_read.push_back(o.selection.inputs_from);
  if (o.complete) o.complete(o.job);
  o.job.report_file = o.report_file;
  std::optional<bn_step> bn;
  if (o.update_bn) {
    if (o.bn.data.path.empty()) throw usage_error("--update-bn needs --data, the samples to replay");
    bn = o.bn;
  } else if (!o.bn.data.path.empty()) {
    throw usage_error("--data is used with --update-bn; add --update-bn to recompute BatchNorm statistics");
  }

  if (bn && !o.job.variants.empty())
    throw usage_error("--update-bn recomputes one average's statistics: give one output");
  if (o.dry_run) {
    if (bn) throw usage_error("--dry-run plans the fold only: run it without --update-bn");
    const std::unique_ptr<fold_job_plan> plan = plan_fold_job(o.job, true);
    const char* command = o.job.config.mode == fold_mode::ema ? "ema" : "average";
    print_dry_run(describe_fold_job(command, o.job, *plan), o.json);
    return;
  }

  const pipeline_report result = run_fold_pipeline(o.job, bn);
  std::vector<const fold_report*> reports = {&result.fold};
  for (const auto& r : result.more) reports.push_back(&r);
  for (const fold_report* r : reports)
    spdlog::info("{}: {} of {} ({}), {:.1f} MB read, {:.1f} MB written in {:.2f} s", r->output, mode_name(r->mode),
                 counted(r->n, "checkpoint"), counted(r->tensors.size(), "tensor"), r->bytes_read / 1e6,
                 r->bytes_written / 1e6, r->wall_time_s);
  spdlog::info("{}", fold_order_line(result.fold.inputs, result.fold.order));
  if (o.report_file.empty() && !o.json) return;
  if (result.more.empty())
    return emit_report(fold_report_json(result.fold, result.bn ? &*result.bn : nullptr), o.report_file, o.json);
  std::string json = "{\"outputs\":[";
  for (size_t i = 0; i < reports.size(); ++i) json += (i ? "," : "") + fold_report_json(*reports[i]);
  emit_report(json + "]}", o.report_file, o.json);
}

}  // namespace swavg
