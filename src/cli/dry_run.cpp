/*
 * --dry-run's plan, gathered from the job's plan (dry_run.h) and rendered as a table or JSON.
 */
#include "cli/dry_run.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <iostream>
#include <nlohmann/json.hpp>

#include "fold/schedule.h"
#include "formats/io/input_kinds.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/json_bytes.h"
#include "util/printable.h"
#include "util/standard_output.h"

namespace swavg {
namespace {

// "12.3 MB", powers of 10 as --max-shard-size counts them.
std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double v = static_cast<double>(n);
  size_t u = 0;
  while (v >= 1000 && u + 1 < std::size(units)) {
    v /= 1000;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

// The per-tensor table (-v): one line per tensor, names escaped and cut to the column.
std::string tensor_table(const dry_run& d) {
  size_t name_width = 6;
  for (const auto& x : d.tensors)
    name_width = std::max(name_width, std::min<size_t>(printable(x.outcome.name).size(), 60));
  std::string t = fmt::format("\nTensors ({}):\n", d.tensors.size());
  t += fmt::format("  {:<{}}  {:<7}  {:<7}  {:<9}  {:<10}  {:<9}  {}\n", "tensor", name_width, "action", "reason",
                   "dtype", "accumulate", "output", "note");
  for (const auto& x : d.tensors) {
    const tensor_outcome& o = x.outcome;
    std::string note;
    if (o.action == tensor_action::latest) note = "copied from the latest input";
    if (o.action == tensor_action::first) note = "copied from the first input";
    if (o.action == tensor_action::drop) note = "left out";
    if (o.action == tensor_action::average) note = fmt::format("averaged over {}", o.count);
    if (!x.action.empty()) note = "copied";
    if (o.buffer) note += ", buffer";
    if (!o.rule.empty()) note += fmt::format(", rule '{}'", printable(o.rule));
    if (!x.tied_to.empty()) note += fmt::format(", tied to '{}'", printable(x.tied_to));
    if (d.folder && !x.file.empty()) note += fmt::format(", in {}", printable(x.file));
    if (!x.written && o.action != tensor_action::drop) note += " (another worker's)";
    const bool averaged = o.action == tensor_action::average;
    t += fmt::format("  {:<{}}  {:<7}  {:<7}  {:<9}  {:<10}  {:<9}  {}\n", printable(o.name), name_width,
                     x.action.empty() ? action_name(o.action) : x.action.c_str(), reason_name(o.reason),
                     dtype_name(o.input_type), averaged ? dtype_name(o.accumulate_type) : "-",
                     dtype_name(o.output_type), note);
  }
  return t;
}

}  // namespace

uint64_t spec_data_bytes(const tensor_spec& t) {
  if (t.alias_of) return 0;
  uint64_t n = itemsize(t.type);
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

dry_run_input dry_run_input_of(const state_dict& sd) {
  return dry_run_input{sd.path, sd.key, input_kind_name(sd.kind)};
}

void dry_run::note_working_set(uint64_t bytes, const std::string& tensor) {
  if (bytes > largest_working_set || peak_tensor.empty()) {
    largest_working_set = std::max(largest_working_set, bytes);
    peak_tensor = tensor;
  }
}

void add_shard_files(dry_run& d, const output_folder& out, const shard_layout& layout,
                     const std::map<std::string, std::string>& metadata) {
  for (size_t s = 0; s < layout.shards.size(); ++s) {
    const output_shard& shard = layout.shards[s];
    dry_run_file f;
    f.path = shard.file;
    f.tensors = shard.specs.size();
    f.data_bytes = shard.bytes;
    f.size = out.planned_file_size(layout, s, metadata);
    f.worker = s % d.worker_count;
    f.written = worker_owns(s, d.worker_index, d.worker_count);
    d.files.push_back(std::move(f));
  }
  d.index = layout.index_name;
}

void total_written(dry_run& d) {
  d.bytes_written = 0;
  d.bytes_written_exact = true;
  for (const auto& f : d.files)
    if (f.written) {
      d.bytes_written += f.size.bytes;
      d.bytes_written_exact &= f.size.exact;
    }
}

dry_run describe_fold_job(const std::string& command, const fold_job& job, const fold_job_plan& p) {
  dry_run d;
  const fold_outline& o = p.outline;
  d.command = command;
  d.mode = mode_name(p.config.mode);
  for (const auto& sd : p.inputs.checkpoints) d.inputs.push_back(dry_run_input_of(sd));
  d.order = job.order;
  if (!p.config.selection.is_null()) {
    d.selection = p.config.selection;
    d.selection_lines = selection_lines(job.selection);
  }
  d.weights = normalised_weights(p.config);
  d.weights_recipe = p.config.weights_recipe;
  d.resume = job.resume;
  d.n = o.plan.n;
  d.output = job.directory && p.folder ? p.folder->path() : job.output;
  d.format = output_format_name(p.format);
  d.folder = job.directory;
  d.worker_index = job.worker.index;
  d.worker_count = job.worker.count;
  for (const auto& e : o.carried) d.carried.push_back({e.entry.name, e.entry.type, e.from});
  d.objects_dropped = o.objects_dropped;

  // The output's files, and for each of its tensors the file holding it and whether this run writes it.
  std::vector<std::string> file_of(o.specs.size());
  std::vector<bool> owned(o.specs.size(), true);
  if (p.layout) {
    const shard_layout& l = *p.layout;
    add_shard_files(d, *p.folder, l, o.metadata);
    owned = specs_owned(l, job.worker.index, job.worker.count);
    // The file shown for a tensor: the first of this worker's holding it, else the first holding it.
    std::vector<bool> shown_own(o.specs.size());
    for (size_t s = 0; s < l.shards.size(); ++s)
      for (size_t i : l.shards[s].specs)
        if (file_of[i].empty() || (d.files[s].written && !shown_own[i])) {
          file_of[i] = l.shards[s].file;
          shown_own[i] = d.files[s].written;
        }
    if (job.worker.index == 0) d.copied = p.extra.copied;
  } else {
    dry_run_file f;
    f.path = job.output;
    f.tensors = o.specs.size();
    for (const auto& t : o.specs) f.data_bytes += spec_data_bytes(t);
    f.size = planned_file_size(job.output, p.format, o.specs, o.metadata, o.objects);
    std::fill(file_of.begin(), file_of.end(), job.output);
    d.files.push_back(std::move(f));
  }
  total_written(d);

  // Every tensor of the plan; the ones this run folds are read, and the largest working set is the peak.
  std::vector<std::optional<size_t>> spec_of(o.plan.tensors.size());
  for (size_t s = 0; s < o.spec_tensor.size(); ++s)
    if (o.spec_tensor[s] < spec_of.size()) spec_of[o.spec_tensor[s]] = s;
  for (size_t k = 0; k < o.plan.tensors.size(); ++k) {
    const tensor_plan& tp = o.plan.tensors[k];
    dry_run_tensor t;
    t.outcome = tp.outcome;
    if (o.ties[k]) t.tied_to = o.plan.tensors[*o.ties[k]].name;
    if (!spec_of[k]) {
      t.written = false;
    } else {
      t.file = file_of[*spec_of[k]];
      t.written = owned[*spec_of[k]];
    }
    if (t.written && !o.ties[k]) {
      for (const auto& s : tp.sources) d.bytes_read += s.view->nbytes();
      d.note_working_set(fold_working_set(tp, std::max<size_t>(job.variants.size(), 1)), tp.name);
    }
    d.tensors.push_back(std::move(t));
  }
  d.peak_memory = d.largest_working_set + kOutputBufferBytes * std::max<size_t>(job.variants.size(), 1);
  for (size_t v = 0; v < job.variants.size(); ++v) {
    const fold_config& c = job.variants[v].config;
    d.variants.push_back(dry_run_variant{p.targets.at(v).path, job.variants[v].label,
                                         c.mode == fold_mode::ema ? std::optional<double>(c.decay) : std::nullopt,
                                         normalised_weights(c)});
  }
  return d;
}

std::string dry_run_json(const dry_run& d) {
  using json = nlohmann::ordered_json;
  json j;
  j["dry_run"] = true;
  j["command"] = d.command;
  j["mode"] = d.mode;
  j["n"] = d.n;
  auto inputs = json::array();
  for (const auto& in : d.inputs) inputs.push_back({{"path", in.path}, {"key", in.key}, {"format", in.format}});
  j["inputs"] = inputs;
  if (!d.order.empty()) j["order"] = d.order;
  if (!d.selection.is_null()) j["selection"] = d.selection;
  if (!d.weights.empty()) j["weights"] = d.weights;
  if (!d.weights_recipe.empty()) j["weights_recipe"] = d.weights_recipe;
  if (!d.variants.empty()) {
    auto outputs = json::array();
    for (const auto& v : d.variants) {
      json o = {{"path", v.path}, {"value", v.label}};
      if (v.decay) o["decay"] = *v.decay;
      if (!v.weights.empty()) o["weights"] = v.weights;
      outputs.push_back(std::move(o));
    }
    j["outputs"] = std::move(outputs);
  }
  if (!d.resume.empty()) j["resume"] = d.resume;

  json out;
  out["path"] = d.output;
  out["format"] = d.format;
  out["folder"] = d.folder;
  out["worker"] = {{"index", d.worker_index}, {"count", d.worker_count}};
  auto files = json::array();
  for (const auto& f : d.files)
    files.push_back({{"file", f.path},
                     {"tensors", f.tensors},
                     {"data_bytes", f.data_bytes},
                     {"bytes", f.size.bytes},
                     {"bytes_exact", f.size.exact},
                     {"worker", f.worker},
                     {"written", f.written}});
  out["files"] = files;
  out["index"] = d.index.empty() ? json(nullptr) : json(d.index);
  out["copied"] = d.copied;
  j["output"] = out;

  size_t kept = 0;
  auto actions = json::object();
  auto details = json::array();
  for (const auto& t : d.tensors) {
    const tensor_outcome& o = t.outcome;
    const std::string action = t.action.empty() ? action_name(o.action) : t.action;
    if (o.action != tensor_action::drop) ++kept;
    actions[action] = actions.value(action, 0) + 1;
    json e = {{"name", o.name},
              {"action", action},
              {"reason", reason_name(o.reason)},
              {"buffer", o.buffer},
              {"count", o.count},
              {"dtype", dtype_name(o.input_type)},
              {"accumulate", dtype_name(o.accumulate_type)},
              {"output_dtype", dtype_name(o.output_type)}};
    if (!o.rule.empty()) e["rule"] = o.rule;
    e["tied_to"] = t.tied_to.empty() ? json(nullptr) : json(t.tied_to);
    e["file"] = t.file.empty() ? json(nullptr) : json(t.file);
    e["written"] = t.written;
    details.push_back(std::move(e));
  }
  j["tensors"] = kept;
  j["actions"] = actions;
  auto carried = json::array();
  for (const auto& e : d.carried) carried.push_back({{"name", e.name}, {"type", e.type}, {"from", e.from}});
  j["carried"] = carried;
  j["objects_dropped"] = d.objects_dropped;
  j["bytes_read"] = d.bytes_read;
  j["bytes_written"] = d.bytes_written;
  j["bytes_written_exact"] = d.bytes_written_exact;
  j["peak_memory"] = {{"bytes", d.peak_memory},
                      {"largest_tensor", d.peak_tensor},
                      {"estimate",
                       "the largest working set of one tensor as the fold holds it (its mapped input slices or "
                       "whole copied tensor, the accumulator and conversion buffers) plus a 4 MiB write buffer per "
                       "output file open at once; the program's own code and libraries are not counted"}};
  j["details"] = details;
  return json_dump(j, 1);
}

// Every name and path in the table goes through printable() (util/printable.h), as inspect's do:
// a tensor or file name cannot move the cursor, forge a line or reorder what is shown.
std::string dry_run_table(const dry_run& d, bool tensors) {
  using P = std::string (*)(std::string_view);
  const P p = printable;
  std::string t = fmt::format("swavg {} --dry-run: the plan; nothing was written\n\n", d.command);
  t += fmt::format("Inputs, in fold order ({}{}):\n", d.inputs.size(),
                   d.order.empty() ? "" : fmt::format("; --sort {}", d.order));
  for (size_t i = 0; i < d.inputs.size(); ++i) {
    const auto& in = d.inputs[i];
    t += fmt::format("  {:>4}  {}  ({}, state dict at {})\n", i + 1, p(in.path), in.format,
                     in.key.empty() ? std::string("the top level") : "'" + p(in.key) + "'");
  }
  if (!d.resume.empty()) t += fmt::format("  resumed from {} (n = {} with the inputs)\n", p(d.resume), d.n);
  if (!d.weights.empty()) {
    t += fmt::format("\nWeights{} (normalised, in fold order):\n",
                     d.weights_recipe.empty() ? "" : fmt::format(" ({})", d.weights_recipe));
    for (size_t i = 0; i < d.weights.size(); ++i) t += fmt::format("  {:>4}  {}\n", i + 1, decimal(d.weights[i]));
  }
  if (!d.variants.empty()) {
    t += fmt::format("\nOutputs, from one read of the inputs ({}; the first is detailed below):\n", d.variants.size());
    for (const auto& v : d.variants)
      t += fmt::format("  {}  {}{}\n", p(v.path), p(v.label),
                       v.weights.empty() ? std::string() : fmt::format("  weights {}", fmt::join(v.weights, ", ")));
  }
  if (!d.selection_lines.empty()) {
    t += fmt::format("\nChosen from {} candidates:\n", d.selection_lines.size());
    for (const auto& line : d.selection_lines) t += fmt::format("  {}\n", line);
  }

  t += fmt::format("\nOutput: {}{} ({}", p(d.output), d.folder ? "/" : "", d.format);
  if (d.worker_count > 1) t += fmt::format("; worker {} of {}", d.worker_index, d.worker_count);
  t += "):\n";
  for (const auto& f : d.files)
    t += fmt::format("  {}  {} tensor{}, {}{} bytes ({}){}\n", p(f.path), f.tensors, f.tensors == 1 ? "" : "s",
                     f.size.exact ? "" : "about ", f.size.bytes, human_bytes(f.size.bytes),
                     d.worker_count > 1 ? fmt::format(", worker {}{}", f.worker, f.written ? " (this one)" : "") : "");
  if (!d.index.empty())
    t += fmt::format("  {}  the index{}\n", p(d.index), d.worker_count > 1 ? " (written by swavg finalize)" : "");
  for (const auto& c : d.copied) t += fmt::format("  {}  copied\n", p(c));

  std::map<std::string, size_t> actions;
  for (const auto& x : d.tensors) ++actions[x.action.empty() ? action_name(x.outcome.action) : x.action];
  std::string counts;
  for (const auto& [action, n] : actions) counts += fmt::format("{}{} {}", counts.empty() ? "" : ", ", n, action);
  t += fmt::format("\nTensors: {}{}{}\n", d.tensors.size(), counts.empty() ? "" : " (" + counts + ")",
                   tensors ? "" : "; -v lists each, --json too");
  if (!d.carried.empty()) {
    t += fmt::format("Non-tensor entries ({}{}):\n", d.carried.size(), d.objects_dropped ? ", left out" : "");
    for (const auto& e : d.carried) t += fmt::format("  {} ({}), from {}\n", p(e.name), p(e.type), p(e.from));
  }
  t += fmt::format("To read: {} bytes ({}); to write: {}{} bytes ({})\n", d.bytes_read, human_bytes(d.bytes_read),
                   d.bytes_written_exact ? "" : "about ", d.bytes_written, human_bytes(d.bytes_written));
  t += fmt::format(
      "Expected peak memory: {} ({} bytes): the largest tensor's working set ('{}') plus the output's write buffer, "
      "besides the program itself\n",
      human_bytes(d.peak_memory), d.peak_memory, p(d.peak_tensor));
  if (tensors) t += tensor_table(d);
  return t;
}

void print_dry_run(const dry_run& d, bool json) {
  write_stdout(json ? dry_run_json(d) + "\n" : dry_run_table(d, spdlog::should_log(spdlog::level::debug)), "the plan");
}

}  // namespace swavg
