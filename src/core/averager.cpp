#include "core/averager.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "core/fold_plan.h"
#include "core/native_kernels.h"
#include "io/save.h"
#include "io/torchscript.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/progress.h"

namespace swavg {
namespace {

constexpr int kMetadataVersion = 1;
constexpr const char* kModulePrefix = "module.";
constexpr const char* kNAveraged = "n_averaged";
constexpr size_t kMaxListedDifferences = 100;

// What an earlier output (--resume) brings: its tensors and how many checkpoints each holds.
struct resume_state {
  state_dict sd;
  std::map<std::string, const tensor_view*> tensors;
  int64_t n = 0;
  std::map<std::string, int64_t> counts;  // only where it differs from n (--allow-missing)
};

dtype accumulator_for(dtype t, accumulate_policy p) {
  if (!is_floating(t)) return t;
  switch (p) {
    case accumulate_policy::automatic: return (t == dtype::float16 || t == dtype::bfloat16) ? dtype::float32 : t;
    case accumulate_policy::native: return t;
    case accumulate_policy::float32: return t == dtype::float64 ? t : dtype::float32;
    case accumulate_policy::float64: return dtype::float64;
  }
  return t;
}

std::string decimal(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

resume_state load_resume(const fold_job& job) {
  resume_state r;
  r.sd = load_state_dict(job.resume, load_options{});
  auto it = r.sd.metadata.find("swavg");
  if (it == r.sd.metadata.end())
    throw usage_error(job.resume + ": --resume needs an output of swavg average/ema (it has no swavg metadata)");
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(it->second);
  } catch (const nlohmann::json::exception& e) {
    throw input_error(job.resume + ": swavg metadata is not valid JSON: " + e.what());
  }
  const fold_config& c = job.config;
  if (meta.value("mode", "") != mode_name(c.mode))
    throw usage_error(job.resume + ": was made in " + meta.value("mode", "?") + " mode, cannot resume it in " +
                      mode_name(c.mode) + " mode");
  if (c.mode == fold_mode::ema && meta.contains("decay") && meta["decay"].get<double>() != c.decay)
    spdlog::warn("{}: was made with decay {}, resuming with decay {}", job.resume, decimal(meta["decay"].get<double>()),
                 decimal(c.decay));
  r.n = meta.value("n", int64_t{0});
  if (r.n < 1) throw input_error(job.resume + ": swavg metadata holds n = " + std::to_string(r.n) + ", expected >= 1");
  if (meta.contains("counts"))
    for (const auto& [k, v] : meta["counts"].items()) r.counts[k] = v.get<int64_t>();
  const bool averaged_model = meta.value("layout", "") == "averaged-model";
  for (auto& t : r.sd.tensors) {
    std::string name = t.name;
    if (averaged_model) {
      if (name == kNAveraged) continue;
      if (name.rfind(kModulePrefix, 0) == 0) name = name.substr(std::string(kModulePrefix).size());
    }
    r.tensors[name] = &t.view;
  }
  if (meta.value("accumulate_differs", false))
    spdlog::warn("{}: its tensors were rounded from a wider accumulator; the resumed average continues from the "
                 "rounded values (write it with --output-dtype equal to the accumulator for exact resumes)",
                 job.resume);
  return r;
}

// Where tensors' kinds come from: --model, else the inputs' own (TorchScript), else names.
class kind_oracle {
 public:
  kind_oracle(const fold_job& job, const std::vector<state_dict>& inputs) {
    if (!job.model.empty()) {
      state_dict m = read_torchscript(job.model);
      for (const auto& t : m.tensors) known_[t.name] = t.kind;
      from_model_ = true;
    }
    for (const auto& sd : inputs)
      for (const auto& t : sd.tensors)
        if (t.kind != tensor_kind::unknown) known_.emplace(t.name, t.kind);
    for (const auto& p : job.config.buffer_patterns) patterns_.push_back(compile_pattern(p, "--buffer"));
  }

  bool is_buffer(const std::string& name) const {
    for (const auto& re : patterns_)
      if (std::regex_search(name, re)) return true;
    auto it = known_.find(name);
    if (it != known_.end()) return it->second == tensor_kind::buffer;
    return is_standard_buffer_name(name);
  }

  bool from_model() const { return from_model_; }

 private:
  std::unordered_map<std::string, tensor_kind> known_;
  std::vector<std::regex> patterns_;
  bool from_model_ = false;
};

// Every difference between the inputs, or an empty list.
std::vector<std::string> find_mismatches(const std::vector<state_dict>& inputs, const resume_state* resume,
                                         const std::vector<std::string>& names, bool allow_missing) {
  std::vector<std::string> out;
  std::map<std::string, std::pair<size_t, const tensor_view*>> reference;  // name -> first input having it
  for (size_t i = 0; i < inputs.size(); ++i)
    for (const auto& t : inputs[i].tensors) reference.emplace(t.name, std::make_pair(i, &t.view));
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::set<std::string> have;
    for (const auto& t : inputs[i].tensors) {
      have.insert(t.name);
      const auto& [ri, rv] = reference.at(t.name);
      if (ri == i) continue;
      if (t.view.shape != rv->shape)
        out.push_back(inputs[i].path + ": tensor '" + t.name + "': expected shape " + shape_string(rv->shape) +
                      " (as in " + inputs[ri].path + ") but found " + shape_string(t.view.shape));
      if (t.view.type != rv->type)
        out.push_back(inputs[i].path + ": tensor '" + t.name + "': expected dtype " + dtype_name(rv->type) + " (as in " +
                      inputs[ri].path + ") but found " + dtype_name(t.view.type));
    }
    if (!allow_missing)
      for (const auto& n : names)
        if (!have.count(n))
          out.push_back(inputs[i].path + ": tensor '" + n + "' is missing (present in " +
                        inputs[reference.at(n).first].path + ")");
  }
  if (resume) {
    for (const auto& [name, view] : resume->tensors) {
      auto it = reference.find(name);
      if (it == reference.end()) {
        if (!allow_missing) out.push_back(resume->sd.path + ": tensor '" + name + "' is in the resumed average but in no input");
        continue;
      }
      const tensor_view* rv = it->second.second;
      if (view->shape != rv->shape)
        out.push_back(resume->sd.path + ": tensor '" + name + "': expected shape " + shape_string(rv->shape) +
                      " (as in " + inputs[it->second.first].path + ") but found " + shape_string(view->shape));
    }
  }
  return out;
}

int64_t count_nonfinite(const tensor_view& v) {
  std::vector<uint8_t> copy;
  return count_nonfinite(v.type, contiguous_data(v, copy), v.numel());
}

// Integer tensors compare by value; bool ones as truth values, whatever their bytes.
bool same_values(dtype t, const uint8_t* a, const uint8_t* b, int64_t n) {
  if (t != dtype::bool_) return std::memcmp(a, b, static_cast<size_t>(n) * itemsize(t)) == 0;
  for (int64_t i = 0; i < n; ++i)
    if ((a[i] != 0) != (b[i] != 0)) return false;
  return true;
}

class folder {
 public:
  folder(const fold_job& job, const std::vector<state_dict>& inputs, tensor_sink& sink, progress& bar)
      : job_(job), c_(job.config), inputs_(inputs), sink_(sink), bar_(bar) {}

  void run(const tensor_plan& p) {
    switch (p.outcome.action) {
      case tensor_action::drop: return;
      case tensor_action::latest:
      case tensor_action::first: copy_one(p); break;
      case tensor_action::average: {
        const chunk_writer write = [this, &p](const void* data, uint64_t bytes) {
          check_finite(p, data, bytes);
          sink_.write(data, bytes);
        };
        if (native_average_covers(c_, p))
          native_average(c_, p, write);
        else
          aten_average(c_, p, write);
        break;
      }
    }
    account(p);
  }

  uint64_t bytes_read() const { return bytes_read_; }

 private:
  void check_finite(const tensor_plan& p, const void* data, uint64_t bytes) {
    const dtype t = p.outcome.output_type;
    if (c_.allow_nonfinite || count_nonfinite(t, data, static_cast<int64_t>(bytes / itemsize(t))) == 0) return;
    std::vector<std::string> where;
    for (const auto& s : p.sources)
      if (int64_t bad = count_nonfinite(*s.view))
        where.push_back(inputs_[s.input].path + " (" + std::to_string(bad) + " values)");
    if (p.resumed)
      if (int64_t bad = count_nonfinite(*p.resumed))
        where.push_back(job_.resume + " (" + std::to_string(bad) + " values)");
    std::string list;
    for (const auto& w : where) list += (list.empty() ? "" : ", ") + w;
    if (list.empty()) list = "none of the inputs: the average overflowed";
    throw input_error("tensor '" + p.name + "' has NaN or Inf values in " + list +
                      "; pass --allow-nonfinite to average them anyway");
  }

  void copy_one(const tensor_plan& p) {
    const bool first = p.outcome.action == tensor_action::first;
    const tensor_view* v = nullptr;
    if (first && p.resumed)
      v = p.resumed;
    else if (!p.sources.empty())
      v = first ? p.sources.front().view : p.sources.back().view;
    else
      v = p.resumed;
    std::vector<uint8_t> copy;
    const uint8_t* data = contiguous_data(*v, copy);
    const int64_t n = v->numel();
    if (c_.ints == int_policy::error && !is_floating(p.outcome.input_type) && !is_complex(p.outcome.input_type)) {
      for (const auto& s : p.sources) {
        std::vector<uint8_t> other_copy;
        if (!same_values(v->type, contiguous_data(*s.view, other_copy), data, n))
          throw mismatch_error(inputs_[s.input].path + ": integer tensor '" + p.name + "' differs from " +
                               (p.sources.front().view == v ? inputs_[p.sources.front().input].path : job_.resume) +
                               "; --int error forbids that (use --int latest or --int first)");
      }
    }
    const dtype out = p.outcome.output_type;
    if (out != v->type) {
      std::vector<uint8_t> converted(static_cast<size_t>(n) * itemsize(out));
      if (!native_convert(v->type, data, out, converted.data(), n))
        throw std::logic_error("no conversion from " + std::string(dtype_name(v->type)) + " to " + dtype_name(out));
      copy.swap(converted);
      data = copy.data();
    }
    const uint64_t bytes = static_cast<uint64_t>(n) * itemsize(out);
    check_finite(p, data, bytes);
    sink_.write(data, bytes);
  }

  void account(const tensor_plan& p) {
    uint64_t bytes = 0;
    for (const auto& s : p.sources) {
      bytes += s.view->nbytes();
      release_pages(*s.view);
    }
    bytes_read_ += bytes;
    bar_.advance(bytes);
  }

  const fold_job& job_;
  const fold_config& c_;
  const std::vector<state_dict>& inputs_;
  tensor_sink& sink_;
  progress& bar_;
  uint64_t bytes_read_ = 0;
};

void validate_config(const fold_job& job) {
  const fold_config& c = job.config;
  if (c.mode == fold_mode::ema && !(c.decay >= 0.0 && c.decay <= 1.0))
    throw usage_error("--decay: expected a value in [0, 1], got " + decimal(c.decay));
  if (c.mode == fold_mode::weighted) {
    if (c.weights.size() != job.inputs.size())
      throw usage_error("--weights: " + std::to_string(c.weights.size()) + " weights for " +
                        std::to_string(job.inputs.size()) + " inputs; give one per input");
    double sum = 0;
    for (double w : c.weights) {
      if (!(w >= 0.0) || !std::isfinite(w)) throw usage_error("--weights: weights must be finite and >= 0, got " + decimal(w));
      sum += w;
    }
    if (!(sum > 0)) throw usage_error("--weights: the weights sum to 0");
    if (!job.resume.empty()) throw usage_error("--resume works with equal weights (SWA) and EMA, not with --weights");
  }
  if (c.mode != fold_mode::ema)
    for (const auto& r : c.rules)
      if (r.decay)
        throw usage_error("--rules: the rule for '" + r.pattern + "' sets a decay, which only swavg ema uses");
  if (c.warmup == warmup_kind::power && !(c.inv_gamma > 0))
    throw usage_error("--inv-gamma: expected a positive value, got " + decimal(c.inv_gamma));
}

}  // namespace

const char* mode_name(fold_mode m) {
  switch (m) {
    case fold_mode::swa: return "swa";
    case fold_mode::ema: return "ema";
    case fold_mode::weighted: return "weighted";
  }
  return "?";
}

double ema_decay_at(const fold_config& c, int64_t n, std::optional<double> rule_decay) {
  const double decay = rule_decay.value_or(c.decay);
  const double step = static_cast<double>(n);
  switch (c.warmup) {
    case warmup_kind::none: return decay;
    case warmup_kind::torch_ema: return std::min(decay, (1.0 + step) / (10.0 + step));
    case warmup_kind::power: {
      double d = 1.0 - std::pow(1.0 + step / c.inv_gamma, -c.power);
      return std::max(c.min_decay, std::min(d, decay));
    }
  }
  return decay;
}

double fold_weight(const fold_config& c, const tensor_plan& p, size_t input, int64_t k, double& weight_total) {
  if (c.mode == fold_mode::ema) return 1.0 - ema_decay_at(c, k, p.rule_decay);
  weight_total += c.weights[input];
  return weight_total > 0 ? c.weights[input] / weight_total : 1.0;
}

fold_report run_fold(const fold_job& job) {
  const auto start = std::chrono::steady_clock::now();
  const fold_config& c = job.config;
  validate_config(job);
  if (c.device != "cpu") check_device(c.device);
  {
    std::vector<std::string> guarded = job.inputs;
    if (!job.model.empty()) guarded.push_back(job.model);
    check_output_path(job.output, guarded, job.force);
  }
  const output_format format = choose_output_format(job.output, job.format);

  std::vector<state_dict> inputs;
  inputs.reserve(job.inputs.size());
  for (const auto& path : job.inputs) inputs.push_back(load_state_dict(path, job.load));
  for (const auto& sd : inputs)
    if (!sd.key.empty() && sd.key != inputs.front().key)
      spdlog::warn("{}: took the state dict at '{}' but at '{}' in {}", sd.path, sd.key, inputs.front().key,
                   inputs.front().path);
  if (!inputs.front().key.empty()) spdlog::info("took the state dict at '{}' in each input", inputs.front().key);
  std::optional<resume_state> resume;
  if (!job.resume.empty()) resume = load_resume(job);

  // Names in first-seen order.
  std::vector<std::string> names;
  {
    std::set<std::string> seen;
    for (const auto& sd : inputs)
      for (const auto& t : sd.tensors)
        if (seen.insert(t.name).second) names.push_back(t.name);
  }
  auto differences = find_mismatches(inputs, resume ? &*resume : nullptr, names, c.allow_missing);
  if (!differences.empty()) {
    std::string msg = "the inputs disagree (" + std::to_string(differences.size()) + " differences):";
    for (size_t i = 0; i < differences.size() && i < kMaxListedDifferences; ++i) msg += "\n  " + differences[i];
    if (differences.size() > kMaxListedDifferences) msg += "\n  ...";
    if (!c.allow_missing) msg += "\n(pass --allow-missing to average each tensor over the checkpoints that have it)";
    throw mismatch_error(msg);
  }

  kind_oracle kinds(job, inputs);
  std::vector<tensor_plan> plans;
  for (const auto& name : names) {
    tensor_plan p;
    p.name = name;
    for (size_t i = 0; i < inputs.size(); ++i)
      for (const auto& t : inputs[i].tensors)
        if (t.name == name) p.sources.push_back(fold_source{i, &t.view});
    if (resume) {
      auto it = resume->tensors.find(name);
      if (it != resume->tensors.end()) {
        p.resumed = it->second;
        auto ct = resume->counts.find(name);
        p.resumed_count = ct == resume->counts.end() ? resume->n : ct->second;
      }
    }
    tensor_outcome& o = p.outcome;
    o.name = name;
    o.input_type = p.sources.front().view->type;
    o.buffer = kinds.is_buffer(name);
    const bool numeric = is_floating(o.input_type) || is_complex(o.input_type);
    if (const tensor_rule* r = match_rule(c.rules, name)) {
      o.action = r->action;
      o.rule = r->pattern;
      o.reason = "rule";
      p.rule_decay = r->decay;
    } else if (!numeric) {
      o.action = tensor_action::average;  // decided by --int below
    } else if (o.buffer && c.buffers == buffer_policy::latest) {
      o.action = tensor_action::latest;
      o.reason = "buffer";
    } else {
      o.action = tensor_action::average;
      o.reason = "default";
    }
    if (!numeric && o.action == tensor_action::average) {
      o.action = c.ints == int_policy::first ? tensor_action::first : tensor_action::latest;
      o.reason = "int";
    }
    o.accumulate_type = o.action == tensor_action::average ? accumulator_for(o.input_type, c.accumulate) : o.input_type;
    o.output_type = (c.output_dtype && is_floating(o.input_type)) ? *c.output_dtype : o.input_type;
    o.count = p.resumed_count + static_cast<int64_t>(p.sources.size());
    plans.push_back(std::move(p));
  }

  for (const auto& p : plans)
    if (p.outcome.action == tensor_action::average && !native_average_covers(c, p))
      require_libtorch("averaging tensor '" + p.name + "' (" + dtype_name(p.outcome.input_type) + " accumulated in " +
                       dtype_name(p.outcome.accumulate_type) + " on " + c.device + ")");

  // Metadata, stored where loaders ignore it, so --resume can continue.
  const int64_t n = (resume ? resume->n : 0) + static_cast<int64_t>(inputs.size());
  nlohmann::ordered_json meta;
  meta["version"] = kMetadataVersion;
  meta["mode"] = mode_name(c.mode);
  meta["n"] = n;
  if (c.mode == fold_mode::ema) {
    meta["decay"] = c.decay;
    meta["warmup"] = c.warmup == warmup_kind::none ? "none" : c.warmup == warmup_kind::torch_ema ? "torch_ema" : "power";
  }
  nlohmann::ordered_json counts = nlohmann::ordered_json::object();
  bool accumulate_differs = false;
  for (const auto& p : plans) {
    if (p.outcome.action == tensor_action::drop) continue;
    if (p.outcome.count != n) counts[p.name] = p.outcome.count;
    accumulate_differs |= p.outcome.accumulate_type != p.outcome.output_type;
  }
  if (!counts.empty()) meta["counts"] = counts;
  if (accumulate_differs) meta["accumulate_differs"] = true;
  meta["layout"] = c.layout == output_layout::averaged_model ? "averaged-model" : "state-dict";
  meta["inputs"] = (resume ? std::vector<std::string>{job.resume} : std::vector<std::string>{});
  for (const auto& i : job.inputs) meta["inputs"].push_back(i);

  std::vector<tensor_spec> specs;
  const std::string prefix = c.layout == output_layout::averaged_model ? kModulePrefix : "";
  uint64_t total_bytes = 0;
  for (const auto& p : plans) {
    if (p.outcome.action == tensor_action::drop) continue;
    specs.push_back(tensor_spec{prefix + p.name, p.outcome.output_type, p.sources.front().view->shape});
    for (const auto& s : p.sources) total_bytes += s.view->nbytes();
  }
  if (c.layout == output_layout::averaged_model) specs.push_back(tensor_spec{kNAveraged, dtype::int64, {}});
  if (specs.empty()) throw usage_error("every tensor was dropped by the rules: nothing to write");

  tensor_sink sink(job.output, format, specs, {{"swavg", meta.dump()}});
  {
    progress bar(total_bytes, "folding");
    folder f(job, inputs, sink, bar);
    for (const auto& p : plans) f.run(p);
    if (c.layout == output_layout::averaged_model) sink.write(&n, sizeof n);
    sink.commit();
    fold_report report;
    report.inputs = job.inputs;
    report.resume = job.resume;
    report.output = job.output;
    report.format = format == output_format::torch ? "torch" : "safetensors";
    report.mode = c.mode;
    report.decay = c.decay;
    report.n = n;
    for (auto& p : plans) report.tensors.push_back(p.outcome);
    report.bytes_read = f.bytes_read();
    report.bytes_written = sink.bytes_written();
    report.wall_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return report;
  }
}

std::string fold_report_json(const fold_report& r) {
  nlohmann::ordered_json j;
  j["output"] = r.output;
  j["format"] = r.format;
  j["mode"] = mode_name(r.mode);
  if (r.mode == fold_mode::ema) j["decay"] = r.decay;
  j["n"] = r.n;
  j["inputs"] = r.inputs;
  if (!r.resume.empty()) j["resume"] = r.resume;
  size_t processed = 0;
  auto buffers = nlohmann::ordered_json::array();
  auto rules = nlohmann::ordered_json::array();
  auto actions = nlohmann::ordered_json::object();
  auto tensors = nlohmann::ordered_json::array();
  for (const auto& t : r.tensors) {
    if (t.action != tensor_action::drop) ++processed;
    if (t.buffer) buffers.push_back(t.name);
    if (!t.rule.empty()) rules.push_back({{"name", t.name}, {"match", t.rule}, {"action", action_name(t.action)}});
    actions[action_name(t.action)] = actions.value(action_name(t.action), 0) + 1;
    tensors.push_back({{"name", t.name},
                       {"action", action_name(t.action)},
                       {"reason", t.reason},
                       {"buffer", t.buffer},
                       {"count", t.count},
                       {"dtype", dtype_name(t.input_type)},
                       {"accumulate", dtype_name(t.accumulate_type)},
                       {"output_dtype", dtype_name(t.output_type)}});
  }
  j["tensors"] = processed;
  j["actions"] = actions;
  j["buffers"] = buffers;
  j["rules"] = rules;
  j["bytes_read"] = r.bytes_read;
  j["bytes_written"] = r.bytes_written;
  j["wall_time_s"] = r.wall_time_s;
  j["details"] = tensors;
  return j.dump(1);
}

}  // namespace swavg
