#include "cli/report.h"

#include <fmt/format.h>

#include <cerrno>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "util/atomic_file.h"
#include "util/error.h"
#include "util/json_bytes.h"
#include "util/standard_output.h"

namespace swavg {

std::string fold_report_json(const fold_report& r, const bn_report* bn) {
  nlohmann::ordered_json j;
  j["output"] = r.output;
  j["format"] = output_format_name(r.format);
  j["mode"] = mode_name(r.mode);
  if (r.mode == fold_mode::ema && !r.power_ema) j["decay"] = r.decay;
  if (r.power_ema)
    j["power_ema"] = {{"sigma_rel", r.power_ema->sigma_rel},
                      {"gamma", r.power_ema->gamma},
                      {"start_t", r.power_ema->start_time},
                      {"times", r.power_ema->times}};
  j["n"] = r.n;
  if (r.avg_fn)
    j["avg_fn"] = {{"option", avg_fn_option(r.avg_fn->kind)}, {"path", r.avg_fn->path}, {"sha256", r.avg_fn->sha256}};
  if (!r.weights.empty()) j["weights"] = r.weights;
  if (!r.weights_recipe.empty()) j["weights_recipe"] = r.weights_recipe;
  j["inputs"] = r.inputs;
  j["order"] = r.order;
  if (!r.selection.is_null()) j["selection"] = r.selection;
  if (!r.resume.empty()) j["resume"] = r.resume;
  size_t processed = 0;
  auto buffers = nlohmann::ordered_json::array();
  auto rules = nlohmann::ordered_json::array();
  auto actions = nlohmann::ordered_json::object();
  for (const auto& t : r.tensors) {
    if (t.action != tensor_action::drop) ++processed;
    if (t.buffer) buffers.push_back(t.name);
    if (!t.rule.empty()) rules.push_back({{"name", t.name}, {"match", t.rule}, {"action", action_name(t.action)}});
    actions[action_name(t.action)] = actions.value(action_name(t.action), 0) + 1;
  }
  j["tensors"] = processed;
  j["actions"] = actions;
  j["buffers"] = buffers;
  j["rules"] = rules;
  auto carried = nlohmann::ordered_json::array();
  for (const auto& e : r.carried) carried.push_back({{"name", e.name}, {"type", e.type}, {"from", e.from}});
  j["carried"] = carried;
  j["objects_dropped"] = r.objects_dropped;
  auto tied = nlohmann::ordered_json::array();
  for (const auto& t : r.tied) tied.push_back({{"name", t.name}, {"to", t.to}});
  j["tied"] = tied;
  j["worker"] = {{"index", r.worker.index}, {"count", r.worker.count}, {"source", r.worker.source}};
  if (r.directory) {
    j["plan_hash"] = r.plan_hash;
    auto shards = nlohmann::ordered_json::array();
    for (const auto& s : r.shards) shards.push_back({{"file", s.file}, {"tensors", s.tensors}, {"bytes", s.bytes}});
    j["shards"] = shards;
    j["copied"] = r.copied;
    j["skipped"] = r.skipped;
  }
  j["bytes_read"] = r.bytes_read;
  j["bytes_written"] = r.bytes_written;
  j["wall_time_s"] = r.wall_time_s;
  if (bn) j["update_bn"] = bn_report_object(*bn);
  // "details", last: one line per tensor, written as text as it is made (a DOM of a million
  // tensors' outcomes would hold over a GB).
  std::string text = report_text(j, 1);
  text.resize(text.size() - 2);  // "\n}"
  text += ",\n \"details\": [";
  for (size_t i = 0; i < r.tensors.size(); ++i) {
    const tensor_outcome& t = r.tensors[i];
    text += i == 0 ? "\n  " : ",\n  ";
    text += report_text(nlohmann::ordered_json{{"name", t.name},
                                               {"action", action_name(t.action)},
                                               {"reason", reason_name(t.reason)},
                                               {"buffer", t.buffer},
                                               {"count", t.count},
                                               {"dtype", dtype_name(t.input_type)},
                                               {"accumulate", dtype_name(t.accumulate_type)},
                                               {"output_dtype", dtype_name(t.output_type)}});
  }
  text += r.tensors.empty() ? "]\n}" : "\n ]\n}";
  return text;
}

std::string finalize_report_json(const std::string& output, const finalize_result& r, bool verified) {
  nlohmann::ordered_json j;
  j["output"] = output;
  if (r.already_published) {
    j["already_published"] = true;
    return j.dump(1);
  }
  j["format"] = output_format_name(r.plan.layout.format);
  j["plan_hash"] = r.plan_hash;
  j["workers"] = r.plan.workers;
  j["verified"] = verified;
  auto shards = nlohmann::ordered_json::array();
  for (const auto& s : r.plan.layout.shards)
    shards.push_back({{"file", s.file}, {"tensors", s.specs.size()}, {"bytes", s.bytes}});
  j["shards"] = shards;
  j["index"] =
      r.plan.layout.indexed() ? nlohmann::ordered_json(r.plan.layout.index_name) : nlohmann::ordered_json(nullptr);
  j["total_size"] = r.plan.layout.total_size;
  j["copied"] = r.plan.copied;
  j["removed_temps"] = r.removed_temps;
  return report_text(j, 1);
}

nlohmann::ordered_json bn_report_object(const bn_report& r) {
  nlohmann::ordered_json j;
  j["model"] = r.model;
  j["data"] = {{"file", r.data},
               {"format", r.data_format},
               {"key", r.data_key},
               {"sample_shape", r.sample_shape},
               {"dtype", dtype_name(r.data_type)}};
  j["input_dtype"] = dtype_name(r.input_type);
  j["device"] = r.device;
  j["batch_size"] = r.batch_size;
  j["batches"] = r.batches;
  j["samples"] = r.samples;
  auto modules = nlohmann::ordered_json::array();
  for (const auto& m : r.modules) {
    nlohmann::ordered_json e = {{"name", m.name}, {"type", m.type}, {"features", m.features}};
    e["momentum"] = m.momentum ? nlohmann::ordered_json(*m.momentum) : nlohmann::ordered_json(nullptr);
    e["batches"] = m.batches;
    modules.push_back(e);
  }
  j["modules"] = modules;
  j["seconds"] = r.seconds;
  return j;
}

std::string report_text(const nlohmann::ordered_json& j, int indent) { return json_text_marked(json_dump(j, indent)); }

// The report file is written atomically, as outputs are; stdout as util/standard_output.h says.
namespace {

std::map<std::string, std::unique_ptr<atomic_file>>& reserved_reports() {
  static std::map<std::string, std::unique_ptr<atomic_file>> files;
  return files;
}

}  // namespace

void reserve_report(const std::string& report_file) {
  if (!report_file.empty() && !reserved_reports().count(report_file))
    reserved_reports()[report_file] = std::make_unique<atomic_file>(report_file);
}

void release_reports() { reserved_reports().clear(); }

void emit_report(const std::string& json, const std::string& report_file, bool to_stdout) {
  const std::string text = json_text_unmarked(json);
  if (!report_file.empty()) {
    reserve_report(report_file);
    atomic_file& out = *reserved_reports().at(report_file);
    out.write(text.data(), text.size());
    out.write("\n", 1);
    out.commit();
    reserved_reports().erase(report_file);
  }
  if (to_stdout) write_stdout(text + "\n", "the report");
}

void emit_failure_reports(const error& e) {
  nlohmann::ordered_json failure;
  failure["exit_code"] = static_cast<int>(e.code());
  failure["message"] = e.what();
  failure["details"] = e.details();
  nlohmann::ordered_json j;
  j["error"] = std::move(failure);
  const std::string json = report_text(j);
  std::vector<std::string> files;
  for (const auto& reserved : reserved_reports()) files.push_back(reserved.first);
  for (const auto& file : files) {
    try {
      emit_report(json, file, false);
    } catch (const error& unwritable) {
      spdlog::warn("{}", unwritable.what());  // the run's own error stays the one reported
    }
  }
}

}  // namespace swavg
