#include "core/averager.h"

#include <ATen/Functions.h>
#include <ATen/Context.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "core/fold_kernels.h"
#include "core/tensor_bridge.h"
#include "io/save.h"
#include "io/torchscript.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/progress.h"

namespace swavg {
namespace {

constexpr int64_t kChunkElements = int64_t{1} << 18;
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

struct source {
  size_t input;  // index into the inputs
  const tensor_view* view;
};

struct tensor_plan {
  std::string name;
  std::vector<source> sources;  // inputs holding the tensor, in fold order
  const tensor_view* resumed = nullptr;
  int64_t resumed_count = 0;
  tensor_outcome outcome;
  std::optional<double> rule_decay;
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

// A flat 1-D slice [begin, begin + length) of a contiguous view, as a tensor on `device`.
at::Tensor chunk_of(const at::Tensor& flat, int64_t begin, int64_t length, const at::Device& device) {
  at::Tensor c = flat.narrow(0, begin, length);
  return device.is_cpu() ? c : c.to(device);
}

at::Tensor flat_tensor(const tensor_view& v) {
  at::Tensor t = to_tensor(v);
  return (v.is_contiguous() ? t : t.contiguous()).reshape({-1});
}

int64_t count_nonfinite(const tensor_view& v) {
  at::Tensor t = to_tensor(v);
  if (!t.is_floating_point() && !t.is_complex()) return 0;
  return at::logical_not(at::isfinite(t)).sum().item<int64_t>();
}

bool all_finite(const at::Tensor& t) {
  if (!t.is_floating_point() && !t.is_complex()) return true;
  if (t.is_floating_point() && std::isfinite(t.sum().item<double>())) return true;  // the fast path
  return at::isfinite(t).all().item<bool>();
}

class folder {
 public:
  folder(const fold_job& job, const std::vector<state_dict>& inputs, tensor_sink& sink, progress& bar)
      : job_(job), c_(job.config), inputs_(inputs), sink_(sink), bar_(bar), device_(parse_device(job.config.device)) {}

  void run(const tensor_plan& p) {
    switch (p.outcome.action) {
      case tensor_action::drop: return;
      case tensor_action::latest:
      case tensor_action::first: return copy_one(p);
      case tensor_action::average: return average(p);
    }
  }

  uint64_t bytes_read() const { return bytes_read_; }

 private:
  static at::Device parse_device(const std::string& d) {
    try {
      at::Device dev(d);
      if (dev.is_cuda() && !at::hasCUDA())
        throw usage_error("--device " + d + ": this swavg was built without CUDA or no GPU is visible");
      if (!dev.is_cpu() && !dev.is_cuda()) throw usage_error("--device: expected cpu or cuda[:N], got '" + d + "'");
      return dev;
    } catch (const c10::Error&) {
      throw usage_error("--device: expected cpu or cuda[:N], got '" + d + "'");
    }
  }

  void write(const at::Tensor& t) {
    at::Tensor c = t.device().is_cpu() ? t.contiguous() : t.to(at::kCPU).contiguous();
    sink_.write(c.data_ptr(), c.nbytes());
  }

  void check_finite(const tensor_plan& p, const at::Tensor& result) {
    if (c_.allow_nonfinite || all_finite(result)) return;
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
    if (c_.ints == int_policy::error && !is_floating(p.outcome.input_type) && !is_complex(p.outcome.input_type)) {
      at::Tensor ref = to_tensor(*v);
      for (const auto& s : p.sources)
        if (!at::equal(to_tensor(*s.view), ref))
          throw mismatch_error(inputs_[s.input].path + ": integer tensor '" + p.name + "' differs from " +
                               (p.sources.front().view == v ? inputs_[p.sources.front().input].path : job_.resume) +
                               "; --int error forbids that (use --int latest or --int first)");
    }
    at::Tensor t = to_tensor(*v);
    if (t.scalar_type() != to_scalar_type(p.outcome.output_type)) t = t.to(to_scalar_type(p.outcome.output_type));
    check_finite(p, t);
    write(t);
    account(p);
  }

  void average(const tensor_plan& p) {
    const auto acc_type = to_scalar_type(p.outcome.accumulate_type);
    const auto out_type = to_scalar_type(p.outcome.output_type);
    std::vector<at::Tensor> flats;
    for (const auto& s : p.sources) {
      flats.push_back(flat_tensor(*s.view));
      if (flats.back().data_ptr() != static_cast<const void*>(s.view->data())) release_pages(*s.view);  // a copy
    }
    at::Tensor resumed = p.resumed ? flat_tensor(*p.resumed) : at::Tensor();
    const int64_t numel = flats.empty() ? resumed.numel() : flats.front().numel();
    // Lerp may take a fused multiply-add path on vector lanes and not on the scalar tail, so EMA and
    // weighted folds run on whole tensors, exactly as PyTorch splits them.
    const int64_t chunk = c_.mode == fold_mode::swa ? kChunkElements : std::max<int64_t>(numel, 1);
    at::Tensor diff;
    for (int64_t begin = 0; begin < numel || (numel == 0 && begin == 0); begin += chunk) {
      const int64_t length = std::min(chunk, numel - begin);
      int64_t k = 0;
      double weight_total = 0.0;
      at::Tensor acc;
      if (p.resumed) {
        acc = chunk_of(resumed, begin, length, device_).to(acc_type, /*non_blocking=*/false, /*copy=*/true);
        k = p.resumed_count;
      }
      for (size_t j = 0; j < flats.size(); ++j) {
        at::Tensor x = chunk_of(flats[j], begin, length, device_);
        const size_t input = p.sources[j].input;
        const tensor_view& view = *p.sources[j].view;
        if (k == 0) {
          acc = x.to(acc_type, /*non_blocking=*/false, /*copy=*/true);
          weight_total = c_.mode == fold_mode::weighted ? c_.weights[input] : 0.0;
        } else if (c_.mode == fold_mode::swa && swa_step_fused(acc, x, k + 1)) {
        } else if (c_.mode == fold_mode::swa) {
          if (!diff.defined() || diff.numel() != length || diff.scalar_type() != acc_type)
            diff = at::empty({length}, acc.options());
          at::sub_out(diff, x, acc);
          diff.div_(at::scalar_tensor(k + 1, at::TensorOptions().dtype(at::kLong).device(device_)));
          acc.add_(diff);
        } else {
          double w;
          if (c_.mode == fold_mode::ema) {
            w = 1.0 - ema_decay_at(c_, k, p.rule_decay);
          } else {
            weight_total += c_.weights[input];
            w = weight_total > 0 ? c_.weights[input] / weight_total : 1.0;
          }
          acc.lerp_(x.scalar_type() == acc_type ? x : x.to(acc_type), w);
        }
        ++k;
        // Done with these input bytes: drop their pages so memory does not grow with the inputs.
        if (flats[j].data_ptr() == static_cast<const void*>(view.data())) {
          const uint64_t item = itemsize(view.type);
          release_pages(view, (static_cast<uint64_t>(view.offset) + begin) * item, static_cast<uint64_t>(length) * item);
        }
      }
      at::Tensor out = acc.scalar_type() == out_type ? acc : acc.to(out_type);
      check_finite(p, out);
      write(out);
      if (numel == 0) break;
    }
    account(p);
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

 private:
  const fold_job& job_;
  const fold_config& c_;
  const std::vector<state_dict>& inputs_;
  tensor_sink& sink_;
  progress& bar_;
  at::Device device_;
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

fold_report run_fold(const fold_job& job) {
  const auto start = std::chrono::steady_clock::now();
  const fold_config& c = job.config;
  validate_config(job);
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
        if (t.name == name) p.sources.push_back(source{i, &t.view});
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
