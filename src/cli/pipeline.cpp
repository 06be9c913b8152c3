#include "cli/pipeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>

#include "cli/read_set.h"
#include "fold/aten.h"
#include "fold/execute.h"
#include "fold/schedule.h"
#include "formats/hf/sharded_input.h"
#include "formats/io/folder_writers.h"
#include "formats/io/output_folder.h"
#include "util/atomic_dir.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_bytes.h"
#include "util/log.h"
#include "util/paths.h"
#include "util/progress.h"
#include "util/sha256.h"
#include "util/version.h"

namespace swavg {
namespace {

// Every file a fold job reads (read_set.h); `data`: --update-bn's samples.
read_set reads_of(const fold_job& job, const std::string& data = "") {
  read_set read;
  for (const auto& in : job.inputs) read.add_checkpoint(in);
  for (const auto& f : job.also_read) read.add_file(f);
  read.add_file(job.model);
  if (job.config.avg_fn) read.add_file(job.config.avg_fn->path);
  read.add_file(data);
  read.add_resumed(job.resume);
  return read;
}

// Refuses, before anything is read, outputs that are read, exist (without --force), are not
// regular files, or are one another.
void check_paths(const fold_job& job, const read_set& read, bool dry_run) {
  read.check_file_outputs({{"-o", job.output, job.force}, {"--report", job.report_file, true}});
  if (!dry_run) reserve_report(job.report_file);
}

std::vector<state_dict> load_checkpoints(const fold_job& job) {
  std::vector<state_dict> inputs;
  inputs.reserve(job.inputs.size());
  progress opening("opening " + counted(job.inputs.size(), "input"), 0, job.inputs.size(), "checkpoint");
  for (const auto& path : job.inputs) {
    inputs.push_back(load_state_dict(path, job.load));
    opening.advance(0, 1);
  }
  // Without --key each input's state dict is found on its own: they must agree, or the average
  // would mix, say, one input's EMA weights with another's raw ones.
  auto where = [](const state_dict& sd) { return sd.key.empty() ? std::string("the top level") : "'" + sd.key + "'"; };
  bool same = true;
  for (const auto& sd : inputs) same &= sd.key == inputs.front().key;
  if (!same) {
    std::string list;
    for (const auto& sd : inputs) list += fmt::format("\n  {}: {}", sd.path, where(sd));
    throw mismatch_error(
        fmt::format("the inputs' state dicts were found at different places:{}\nchoose one with "
                    "--key PATH (it must exist in every input)",
                    list));
  }
  if (!inputs.front().key.empty()) spdlog::info("took the state dict at '{}' in each input", inputs.front().key);
  return inputs;
}

// A folder output is replaced as a whole: it (and OUT.partial/) must hold none of the inputs, even
// with --force, and neither may --report lie in it.
void check_directory_paths(const fold_job& job, const output_folder& out, const read_set& read, bool dry_run) {
  out.refuse_missing_parent();
  out.refuse_not_folder(" (-o DIR/ writes a Hugging Face folder)");
  read.check_folder_output(out, {{"--report", job.report_file, true}});
  out.refuse_non_empty();
  if (!dry_run) reserve_report(job.report_file);
}

// Into `in`, where the plan's views of them stay (a resumed average is not moved).
void load_fold_inputs(const fold_job& job, fold_inputs& in) {
  in.checkpoints = load_checkpoints(job);
  if (!job.resume.empty()) in.resume.emplace(open_resumed(load_state_dict(job.resume, load_options{}), job.config));
  if (!job.model.empty()) {
    model_kind(job.model);
    for (const auto& t : load_state_dict(job.model).tensors) in.model_kinds[t.name] = t.kind;
  }
}

// The configuration as run: a power-function EMA that is resumed continues from the record's last time.
fold_config config_for(const fold_job& job, const fold_inputs& in) {
  fold_config c = job.config;
  if (c.power_ema && in.resume) {
    c.power_ema->start_time = *in.resume->record.last_t;
    validate_config(c, job.inputs.size(), true);
  }
  return c;
}

// What every fold report says, file or folder output.
fold_report report_of(const fold_job& job, const fold_config& c, output_format format, fold_result&& result) {
  fold_report report;
  report.inputs = job.inputs;
  report.order = job.order;
  report.resume = job.resume;
  report.output = job.output;
  report.format = format;
  report.mode = c.mode;
  report.decay = c.decay;
  report.power_ema = c.power_ema;
  report.n = result.n;
  report.avg_fn = c.avg_fn;
  report.weights = normalised_weights(c);
  report.weights_recipe = c.weights_recipe;
  report.selection = c.selection;
  report.tensors = std::move(result.tensors);
  for (const auto& e : result.carried) report.carried.push_back({e.entry.name, e.entry.type, e.from});
  report.objects_dropped = result.objects_dropped;
  report.tied = result.tied;
  report.bytes_read = result.bytes_read;
  report.bytes_written = result.bytes_written;
  return report;
}

const char* int_policy_option(int_policy p) {
  return p == int_policy::first ? "first" : p == int_policy::error ? "error" : "latest";
}

const char* accumulate_option(accumulate_policy a) {
  switch (a) {
    case accumulate_policy::native: return "native";
    case accumulate_policy::float32: return "float32";
    case accumulate_policy::float64: return "float64";
    case accumulate_policy::automatic: break;
  }
  return "auto";
}

std::string numbers(const std::vector<double>& values) { return fmt::format("{}", fmt::join(values, ",")); }

// The job's identity for the plan: every option that changes an output byte, as the command line
// names it, in its order (worker_files.h). Workers that differ in any are of different jobs.
job_options job_identity(const fold_job& job, const fold_config& c, output_format format) {
  job_options o;
  o.emplace_back("swavg's version", SWAVG_VERSION);
  o.emplace_back("the mode", mode_name(c.mode));
  if (c.mode == fold_mode::ema && c.power_ema) {
    o.emplace_back("--power-sigma-rel", fmt::format("{}", c.power_ema->sigma_rel));
    o.emplace_back("--snapshot-times", numbers(c.power_ema->times));
    o.emplace_back("the resumed time", fmt::format("{}", c.power_ema->start_time));
  } else if (c.mode == fold_mode::ema) {
    o.emplace_back("--decay", fmt::format("{}", c.decay));
    o.emplace_back("--warmup", warmup_name(c.warmup));
    if (c.warmup == warmup_kind::power) {
      o.emplace_back("--inv-gamma", fmt::format("{}", c.inv_gamma));
      o.emplace_back("--power", fmt::format("{}", c.power));
    }
    if (c.warmup != warmup_kind::none) o.emplace_back("--min-decay", fmt::format("{}", c.min_decay));
  }
  if (c.mode == fold_mode::weighted) o.emplace_back("--weights", numbers(c.weights));
  if (c.avg_fn) o.emplace_back(avg_fn_option(c.avg_fn->kind), "sha256 " + c.avg_fn->sha256);
  o.emplace_back("--buffers", buffer_policy_name(c.buffers));
  o.emplace_back("--buffer", fmt::format("{}", fmt::join(c.buffer_patterns, "\n")));
  o.emplace_back("--model", job.model.empty() ? "" : "sha256 " + sha256_file(job.model));
  o.emplace_back("--int", int_policy_option(c.ints));
  auto rules = nlohmann::ordered_json::array();
  for (const auto& r : c.rules) {
    nlohmann::ordered_json rule = {{"match", r.pattern}, {"action", action_name(r.action)}};
    if (r.decay) rule["decay"] = *r.decay;
    rules.push_back(rule);
  }
  o.emplace_back("--rules", rules.dump());
  o.emplace_back("--accumulate", accumulate_option(c.accumulate));
  o.emplace_back("--output-dtype", c.output_dtype ? dtype_name(*c.output_dtype) : "");
  o.emplace_back("--allow-missing", c.allow_missing ? "yes" : "no");
  o.emplace_back("--allow-nonfinite", c.allow_nonfinite ? "yes" : "no");
  o.emplace_back("--key", job.load.key);
  o.emplace_back("--exclude", fmt::format("{}", fmt::join(job.load.exclude, "\n")));
  o.emplace_back("--strip-prefix", fmt::format("{}", fmt::join(job.load.strip_prefixes, "\n")));
  o.emplace_back("--layout", layout_name(c.layout));
  o.emplace_back("--drop-objects", job.drop_objects ? "yes" : "no");
  o.emplace_back("--format", output_format_name(format));
  o.emplace_back("--max-shard-size", std::to_string(job.max_shard_size));
  return o;
}

// -o DIR/: the shards (this worker's), the files copied from the last input's folder, and the index,
// staged and published (plain run) or left in OUT.partial/ with a manifest (worker of several).
std::unique_ptr<fold_job_plan> plan_directory_job(const fold_job& job, bool dry_run) {
  auto p = std::make_unique<fold_job_plan>();
  p->start = std::chrono::steady_clock::now();
  const fold_config& c = job.config;
  const worker_id& w = job.worker;
  validate_config(c, job.inputs.size(), !job.resume.empty());
  check_device(c.device);
  require_lerp_kernels(c);
  p->folder = std::make_unique<output_folder>(job.output, w.index, w.count, job.force);
  output_folder& out = *p->folder;
  check_directory_paths(job, out, reads_of(job), dry_run);
  if (!dry_run)
    out.hold_partial();
  else if (!out.plain())
    refuse_interrupted_finalize(out.path());  // what hold_partial() refuses, but a finalize's lock
  const output_format format = job.format.value_or(output_format::safetensors);

  load_fold_inputs(job, p->inputs);
  const fold_inputs& in = p->inputs;
  const fold_config folded = config_for(job, in);
  folder_files extra;
  const checkpoint_location source = output_source_of(job.inputs.back());
  const std::string& source_folder = source.folder;
  if (!source_folder.empty()) extra = classify_folder(source_folder);
  for (const auto& name : extra.skipped)
    spdlog::debug("{}/{}: not copied (weights, an index or not a file)", source_folder, name);

  p->format = format;
  p->config = folded;
  p->source = source;
  p->extra = std::move(extra);
  p->target = fold_target{out.path(), format, job.drop_objects, &out};
  p->outline = outline_fold(p->config, in, p->target);
  out.use(make_folder_writer({out.path(), format, job.max_shard_size, source.names, source.index, job.inputs.front(),
                              in.checkpoints.front().key}));
  p->layout = out.plan_shards(p->outline.specs, p->outline.metadata);
  if (dry_run)
    out.check_partial_plan(p->outline.specs, p->outline.metadata, p->extra.copied, job_identity(job, folded, format));
  return p;
}

// The shards the sink wrote are the ones planned (and shown by --dry-run).
void check_planned_shards(const shard_layout& planned, const shard_layout& written) {
  bool same = planned.shards.size() == written.shards.size();
  for (size_t s = 0; same && s < planned.shards.size(); ++s)
    same = planned.shards[s].file == written.shards[s].file && planned.shards[s].specs == written.shards[s].specs;
  if (!same) throw error(exit_code::internal, "the output's shards differ from the planned ones");
}

fold_report execute_directory_job(const fold_job& job, fold_job_plan& p) {
  const worker_id& w = job.worker;
  output_folder& out = *p.folder;
  const output_format format = p.format;
  const fold_config& folded = p.config;
  const folder_files& extra = p.extra;
  out.hold_partial();
  out.stage(p.source.folder, extra.copied, job_identity(job, folded, format));
  fold_result result = run_fold(folded, p.inputs, p.outline, p.target);
  check_planned_shards(*p.layout, out.layout());
  out.finish();
  if (!out.plain()) spdlog::info("{}", worker_done_message(w, out.partial(), out.files().size(), out.path()));

  fold_report report = report_of(job, folded, format, std::move(result));
  report.worker = w;
  report.directory = true;
  report.plan_hash = out.plan_hash();
  for (size_t s = 0; s < out.layout().shards.size(); ++s)
    if (worker_owns(s, w.index, w.count)) {
      const output_shard& shard = out.layout().shards[s];
      report.shards.push_back({shard.file, shard.specs.size(), shard.bytes});
    }
  if (w.index == 0) report.copied = extra.copied;
  report.skipped = extra.skipped;
  report.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count();
  return report;
}

std::unique_ptr<fold_job_plan> plan_file_job(const fold_job& job, bool dry_run) {
  auto p = std::make_unique<fold_job_plan>();
  p->start = std::chrono::steady_clock::now();
  const fold_config& c = job.config;
  validate_config(c, job.inputs.size(), !job.resume.empty());
  check_device(c.device);
  require_lerp_kernels(c);
  check_paths(job, reads_of(job), dry_run);
  const output_format format = choose_output_format(job.output, job.format);
  refuse_folder_format(job.output, format);

  p->format = format;
  load_fold_inputs(job, p->inputs);
  p->config = config_for(job, p->inputs);
  p->target = fold_target{job.output, format, job.drop_objects, nullptr};
  p->outline = outline_fold(p->config, p->inputs, p->target);
  return p;
}

// Several outputs from one read: every output checked as -o is, the inputs loaded once, each
// output's fold planned (they differ in their schedule only).
std::unique_ptr<fold_job_plan> plan_variant_job(const fold_job& job, bool dry_run) {
  auto p = std::make_unique<fold_job_plan>();
  p->start = std::chrono::steady_clock::now();
  std::vector<output_path> outputs;
  for (const auto& v : job.variants) {
    validate_config(v.config, job.inputs.size(), false);
    outputs.push_back({"-o", v.output, job.force});
  }
  check_device(job.config.device);
  require_lerp_kernels(job.config);
  outputs.push_back({"--report", job.report_file, true});
  reads_of(job).check_file_outputs(outputs);
  if (!dry_run) reserve_report(job.report_file);
  p->format = choose_output_format(job.variants.front().output, job.format);
  for (const auto& v : job.variants) {
    refuse_folder_format(v.output, p->format);
    if (choose_output_format(v.output, job.format) != p->format)
      throw usage_error(
          fmt::format("{} and {} would be written as {} and {}: one read writes one format; give "
                      "--format or one extension",
                      job.variants.front().output, v.output, output_format_name(p->format),
                      output_format_name(choose_output_format(v.output, job.format))));
  }
  load_fold_inputs(job, p->inputs);
  for (const auto& v : job.variants) {
    p->configs.push_back(v.config);
    p->targets.push_back(fold_target{v.output, p->format, job.drop_objects, nullptr});
    p->outlines.push_back(outline_fold(p->configs.back(), p->inputs, p->targets.back()));
  }
  p->config = p->configs.front();
  p->target = p->targets.front();
  p->outline = p->outlines.front();
  return p;
}

std::vector<fold_report> execute_variant_job(const fold_job& job, fold_job_plan& p) {
  std::vector<fold_result> results = run_folds(p.configs, p.inputs, p.outlines, p.targets);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count();
  std::vector<fold_report> reports;
  for (size_t o = 0; o < results.size(); ++o) {
    fold_job one = job;
    one.output = job.variants[o].output;
    reports.push_back(report_of(one, p.configs[o], p.format, std::move(results[o])));
    reports.back().wall_time_s = wall;
  }
  return reports;
}

}  // namespace

bool is_directory_output(const std::string& output) {
  return (!output.empty() && output.back() == '/') || is_folder(output);
}

std::unique_ptr<fold_job_plan> plan_fold_job(const fold_job& job, bool dry_run) {
  if (!job.variants.empty()) return plan_variant_job(job, dry_run);
  return job.directory ? plan_directory_job(job, dry_run) : plan_file_job(job, dry_run);
}

fold_report execute_fold_job(const fold_job& job, fold_job_plan& p) {
  if (!job.variants.empty()) throw std::logic_error("a job of several outputs runs through run_fold_pipeline");
  if (job.directory) return execute_directory_job(job, p);
  fold_report report = report_of(job, p.config, p.format, run_fold(p.config, p.inputs, p.outline, p.target));
  report.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - p.start).count();
  return report;
}

fold_report run_fold_job(const fold_job& job) {
  const std::unique_ptr<fold_job_plan> plan = plan_fold_job(job);
  return execute_fold_job(job, *plan);
}

uint64_t save_updated_state(const std::string& path, output_format format, const update_bn_result& updated,
                            std::map<std::string, std::string> metadata, const std::vector<object_entry>& objects) {
  metadata["swavg_update_bn"] = json_dump(bn_report_object(updated.report));
  return save_state_dict(path, updated.tensors, format, metadata, objects);
}

pipeline_report run_fold_pipeline(const fold_job& job, const std::optional<bn_step>& bn) {
  pipeline_report report;
  if (!job.variants.empty()) {
    if (bn) throw usage_error("--update-bn recomputes one average's statistics: give one output");
    const std::unique_ptr<fold_job_plan> plan = plan_fold_job(job);
    std::vector<fold_report> reports = execute_variant_job(job, *plan);
    report.fold = std::move(reports.front());
    report.more.assign(std::make_move_iterator(reports.begin() + 1), std::make_move_iterator(reports.end()));
    return report;
  }
  if (!bn) {
    report.fold = run_fold_job(job);
    return report;
  }
  if (job.directory) throw usage_error("--update-bn writes one file: it does not take a folder output (-o DIR/)");
  if (job.model.empty())
    throw usage_error("--update-bn needs --model NET.ts, the TorchScript model to replay data through");
  require_libtorch("--update-bn");
  check_paths(job, reads_of(job, bn->data.path), false);
  const output_format format = choose_output_format(job.output, job.format);
  const dataset data = open_dataset(bn->data);

  held_temp folded(temp_path_beside(job.output, "fold"));
  fold_job fold = job;
  fold.output = folded.path();
  fold.format = format;
  fold.force = true;
  fold.report_file.clear();
  report.fold = run_fold_job(fold);
  report.fold.output = job.output;
  folded.hold();

  state_dict averaged = load_state_dict(folded.path());
  bn_options options = bn->options;
  options.device = job.config.device;
  update_bn_result updated = update_batchnorm(job.model, averaged.tensors, job.output, data, options);
  spdlog::info("{}: {} updated from {}", job.model, counted(updated.report.modules.size(), "BatchNorm module"),
               counted(updated.report.batches, "batch", "batches"));
  report.fold.bytes_written = save_updated_state(job.output, format, updated, averaged.metadata, averaged.objects);
  report.bn = std::move(updated.report);
  return report;
}

}  // namespace swavg
