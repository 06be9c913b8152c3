/*
 * `swavg posthoc-ema`: EDM2's post-hoc EMA reconstruction (fold/phema.h for the math,
 * fold/posthoc.h for the pass over the tensors). Snapshots' training times and sigma_rel come from
 * their names (`snap-0004096-0.050.pt`) or from --snapshot-times/--snapshot-sigmas; only those with
 * t <= T (--at, default the latest) are used. Several --sigma-rel values write several outputs, `-o`
 * then a pattern with `{sigma_rel}` replaced by each value as given.
 */
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <optional>

#include "cli/commands.h"
#include "cli/dry_run.h"
#include "cli/load_options.h"
#include "cli/options.h"
#include "cli/read_set.h"
#include "cli/report.h"
#include "fold/config.h"
#include "fold/phema.h"
#include "fold/posthoc.h"
#include "formats/io/load.h"
#include "util/atomic_file.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/json_bytes.h"

namespace swavg {
namespace {

constexpr const char* kPlaceholder = "{sigma_rel}";
constexpr const char* kMetadataKey = "swavg_posthoc_ema";

struct posthoc_options {
  std::vector<std::string> inputs;
  std::vector<std::string> sigma_rels;  // as given: they name the outputs
  std::optional<double> at;
  std::vector<double> times;
  std::vector<double> sigmas;
  std::string output;
  std::optional<output_format> format;
  bool force = false;
  bool drop_objects = false;
  bool allow_nonfinite = false;
  load_options load;
  std::optional<dtype> output_dtype;
  std::string report_file;
  bool json = false;
  bool dry_run = false;
};

double parse_sigma(const std::string& text) {
  const auto v = parse_decimal(text);
  if (!v) throw usage_error(fmt::format("--sigma-rel: expected a number, got '{}'", text));
  return *v;
}

// Each snapshot's profile: from the lists, else from its name.
std::vector<ema_profile> snapshot_profiles(const posthoc_options& o) {
  const size_t n = o.inputs.size();
  if (!o.times.empty() && o.times.size() != n)
    throw usage_error(fmt::format("--snapshot-times has {} values for {} snapshots", o.times.size(), n));
  if (!o.sigmas.empty() && o.sigmas.size() != n && o.sigmas.size() != 1)
    throw usage_error(
        fmt::format("--snapshot-sigmas has {} values for {} snapshots (give one per snapshot, or one for all)",
                    o.sigmas.size(), n));
  std::vector<ema_profile> profiles(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& path = o.inputs[i];
    std::optional<snapshot_name> named;
    if (o.times.empty() || o.sigmas.empty()) {
      named = parse_snapshot_name(path);
      if (!named)
        throw usage_error(
            fmt::format("{}: the name does not end in EDM2's -<t>-<sigma_rel> (as in snap-0004096-0.050.pt); give "
                        "--snapshot-times and --snapshot-sigmas",
                        path));
    }
    ema_profile& p = profiles[i];
    p.t = o.times.empty() ? named->t : o.times[i];
    p.sigma_rel = o.sigmas.empty() ? named->sigma_rel : o.sigmas[o.sigmas.size() == 1 ? 0 : i];
    if (!std::isfinite(p.t) || p.t <= 0)
      throw usage_error(fmt::format("{}: training time t must be finite and > 0, found {}", path, p.t));
    p.gamma = sigma_rel_to_gamma(p.sigma_rel, fmt::format("{}: snapshot", path));
  }
  return profiles;
}

struct planned_output {
  std::string sigma_text;
  double sigma_rel;
  phema_solution solution;
  std::string path;
};

nlohmann::ordered_json output_json(const planned_output& out, const std::vector<ema_profile>& profiles,
                                   const std::vector<std::string>& inputs) {
  nlohmann::ordered_json j;
  j["output"] = out.path;
  j["sigma_rel"] = out.sigma_rel;
  j["gamma"] = out.solution.gamma;
  j["at"] = out.solution.at;
  j["condition_estimate"] = out.solution.condition;
  auto used = nlohmann::ordered_json::array();
  for (size_t k = 0; k < out.solution.used.size(); ++k) {
    const size_t i = out.solution.used[k];
    used.push_back({{"path", inputs[i]},
                    {"t", profiles[i].t},
                    {"sigma_rel", profiles[i].sigma_rel},
                    {"gamma", profiles[i].gamma},
                    {"coefficient", out.solution.coefficients[k]}});
  }
  j["snapshots"] = used;
  auto excluded = nlohmann::ordered_json::array();
  for (size_t i = 0; i < profiles.size(); ++i)
    if (profiles[i].t > out.solution.at)
      excluded.push_back({{"path", inputs[i]},
                          {"t", profiles[i].t},
                          {"sigma_rel", profiles[i].sigma_rel},
                          {"why", fmt::format("t = {} is after T = {}", profiles[i].t, out.solution.at)}});
  j["excluded"] = excluded;
  return j;
}

// --dry-run: the snapshots in the order they are combined, every tensor (combined in float64, or
// copied from the last snapshot), each output file.
dry_run describe_posthoc(const std::vector<state_dict>& snapshots, const std::vector<posthoc_output>& targets,
                         const posthoc_outline& outline, output_format format) {
  dry_run d;
  d.command = "posthoc-ema";
  d.mode = "posthoc-ema";
  for (const auto& sd : snapshots) d.inputs.push_back(dry_run_input_of(sd));
  d.n = static_cast<int64_t>(snapshots.size());
  d.output = targets.front().path;
  d.format = output_format_name(format);
  d.objects_dropped = outline.objects_dropped;
  for (const auto& e : outline.objects) d.carried.push_back({e.name, e.type, snapshots.back().path});
  for (const auto& p : outline.plan.tensors) {
    dry_run_tensor t;
    t.outcome = p.outcome;
    if (t.outcome.action == tensor_action::average) t.outcome.accumulate_type = dtype::float64;
    t.file = targets.size() == 1 ? targets.front().path : std::string("every output");
    for (const auto& s : p.sources) d.bytes_read += s.view->nbytes();
    d.note_working_set(posthoc_working_set(p, targets.size()), p.name);
    d.tensors.push_back(std::move(t));
  }
  for (const auto& target : targets) {
    std::map<std::string, std::string> metadata = outline.inherited;
    for (const auto& [k, v] : target.metadata) metadata[k] = v;
    dry_run_file f;
    f.path = target.path;
    f.tensors = outline.specs.size();
    for (const auto& s : outline.specs) f.data_bytes += spec_data_bytes(s);
    f.size = planned_file_size(target.path, format, outline.specs, metadata, outline.objects);
    d.files.push_back(std::move(f));
  }
  total_written(d);
  d.peak_memory = d.largest_working_set + targets.size() * kOutputBufferBytes;
  return d;
}

void run_posthoc_ema(const posthoc_options& o) {
  const auto start = std::chrono::steady_clock::now();
  if (o.inputs.empty()) throw usage_error("posthoc-ema needs snapshots");
  const std::vector<std::string> paths = outputs_for(o.output, kPlaceholder, "--sigma-rel", o.sigma_rels);
  const std::vector<ema_profile> profiles = snapshot_profiles(o);
  double latest = 0;
  for (const auto& p : profiles) latest = std::max(latest, p.t);
  const double at = o.at.value_or(latest);

  std::vector<planned_output> outs;
  for (size_t s = 0; s < o.sigma_rels.size(); ++s) {
    const std::string& text = o.sigma_rels[s];
    const double sigma = parse_sigma(text);
    outs.push_back(planned_output{text, sigma, solve_phema(profiles, sigma, at), paths[s]});
    const double condition = outs.back().solution.condition;
    if (phema_ill_conditioned(condition))
      spdlog::warn(
          "--sigma-rel {}: the snapshots' system is ill-conditioned (condition estimate {:.3g}, above {:.0e}): the "
          "coefficients may be inaccurate; snapshots whose profiles are nearly alike (close in t and sigma_rel) "
          "make it so: use fewer, further apart",
          text, condition, kMaxPhemaCondition);
  }
  read_set read;
  for (const auto& in : o.inputs) read.add_checkpoint(in);
  std::vector<output_path> written;
  for (const auto& out : outs) written.push_back({"-o", out.path, o.force});
  written.push_back({"--report", o.report_file, true});
  read.check_file_outputs(written);
  if (!o.dry_run) reserve_report(o.report_file);
  const output_format format = choose_output_format(outs.front().path, o.format);

  // The snapshots used, by increasing t (stable): the last holds the buffers.
  std::vector<size_t> order = outs.front().solution.used;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return profiles[a].t < profiles[b].t; });
  std::vector<state_dict> snapshots;
  for (size_t i : order) snapshots.push_back(load_state_dict(o.inputs[i], o.load));
  for (const auto& sd : snapshots)
    if (sd.key != snapshots.front().key)
      throw mismatch_error(
          fmt::format("the snapshots' state dicts were found at different places: '{}' in {}, '{}' in "
                      "{}; choose one with --key PATH",
                      snapshots.front().key, snapshots.front().path, sd.key, sd.path));

  std::vector<posthoc_output> targets;
  nlohmann::ordered_json report;
  report["command"] = "posthoc-ema";
  report["format"] = output_format_name(format);
  auto outputs_json = nlohmann::ordered_json::array();
  for (const auto& out : outs) {
    posthoc_output t{out.path, {}, {}};
    for (size_t i : order) {
      const auto k = std::find(out.solution.used.begin(), out.solution.used.end(), i) - out.solution.used.begin();
      t.coefficients.push_back(out.solution.coefficients[static_cast<size_t>(k)]);
    }
    nlohmann::ordered_json j = output_json(out, profiles, o.inputs);
    t.metadata[kMetadataKey] = json_dump(j);
    outputs_json.push_back(std::move(j));
    targets.push_back(std::move(t));
  }
  const posthoc_outline outline = outline_posthoc(snapshots, targets, format, o.output_dtype, o.drop_objects);
  if (o.dry_run) return print_dry_run(describe_posthoc(snapshots, targets, outline, format), o.json);
  const posthoc_result result = run_posthoc(snapshots, targets, outline, format, o.allow_nonfinite);
  report["outputs"] = outputs_json;
  report["tensors"] = result.tensors.size();
  size_t averaged = 0;
  for (const auto& t : result.tensors) averaged += t.action == tensor_action::average;
  report["combined"] = averaged;
  report["copied_from_last"] = result.tensors.size() - averaged;
  report["objects_dropped"] = result.objects_dropped;
  report["bytes_read"] = result.bytes_read;
  report["bytes_written"] = result.bytes_written;
  report["wall_time_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& out : outs)
    spdlog::info("{}: post-hoc EMA sigma_rel {} (gamma {:.6g}) at T = {} from {} snapshots", out.path, out.sigma_text,
                 out.solution.gamma, at, out.solution.used.size());
  emit_report(report_text(report, 1), o.report_file, o.json);
}

}  // namespace

command setup_posthoc_ema(CLI::App& parent) {
  auto o = std::make_shared<posthoc_options>();
  CLI::App* app = parent.add_subcommand(
      "posthoc-ema", "EDM2's post-hoc EMA: reconstruct a power-function EMA of any sigma_rel from EMA snapshots");
  app->add_option("inputs", o->inputs, "Snapshots (any format swavg reads), named <anything>-<t>-<sigma_rel>.<ext>");
  app->add_option("--sigma-rel", o->sigma_rels, "Target sigma_rel in (0, 0.28); repeat for several outputs")
      ->required();
  app->add_option("--at", o->at, "Target training time T (default: the latest snapshot's); later snapshots are unused");
  app->add_option("--snapshot-times", o->times, "Each snapshot's training time t, instead of its name")->delimiter(',');
  app->add_option("--snapshot-sigmas", o->sigmas, "Each snapshot's sigma_rel (or one for all), instead of its name")
      ->delimiter(',');
  app->add_option("-o,--output", o->output, "File to write; with several --sigma-rel a pattern with {sigma_rel}")
      ->required();
  add_format_option(app, o->format);
  app->add_flag("--force", o->force, "Replace existing outputs");
  app->add_flag("--drop-objects", o->drop_objects, "Leave non-tensor entries out of the outputs");
  app->add_flag("--allow-nonfinite", o->allow_nonfinite, "Accept NaN and Inf values in the snapshots");
  add_load_options(app, o->load);
  add_dtype_option(app, "--output-dtype", o->output_dtype, /*floating_only=*/true,
                   "Write floating tensors in this dtype (default: the snapshots')");
  app->add_option("--report", o->report_file, "Write a JSON report to FILE");
  app->add_flag("--json", o->json, "Print the JSON report on stdout (with --dry-run: the plan)");
  app->add_flag("--dry-run", o->dry_run,
                "Check everything and print the plan (snapshots, every tensor, the outputs and their sizes, bytes and "
                "peak memory) instead of writing; writes nothing");
  app->footer(
      "Examples:\n"
      "  swavg posthoc-ema --sigma-rel 0.10 snaps/snap-*-0.050.pt snaps/snap-*-0.100.pt -o ema-0.10.pt\n"
      "  swavg posthoc-ema --sigma-rel 0.05 --sigma-rel 0.15 --at 8192 snaps/* -o 'ema-{sigma_rel}.safetensors'");
  return {app, [o] { run_posthoc_ema(*o); }};
}

}  // namespace swavg
