#include "fold/execute.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "fold/aten.h"
#include "fold/avg_fn.h"
#include "fold/int_average.h"
#include "fold/layout.h"
#include "fold/native_fold.h"
#include "fold/native_kernels.h"
#include "fold/prefetch.h"
#include "fold/schedule.h"
#include "formats/torch/torch_file.h"
#include "util/error.h"
#include "util/log.h"
#include "util/paths.h"
#include "util/printable.h"
#include "util/progress.h"
#include "util/version.h"

namespace swavg {
namespace {

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

// The running average of each planned tensor over the inputs (or the one copied), streamed into
// each lane's sink tensor after tensor. Lanes (run_folds) share everything but their schedule, so
// what they share (the copies, the checks, --int error) is done once and the inputs are read once
// where swavg's kernels fold (the integer and ATen folds run once per lane).
class running_average {
 public:
  running_average(std::vector<fold_lane> lanes, const fold_inputs& in, progress& bar, prefetcher* ahead,
                  avg_function* fn, std::unordered_map<const tensor_plan*, tensor_view> fn_results)
      : c_(*lanes.front().config),
        lanes_(std::move(lanes)),
        in_(in),
        bar_(bar),
        ahead_(ahead),
        fn_(fn),
        fn_results_(std::move(fn_results)) {}

  void run(const tensor_plan& p) {
    if (ahead_) ahead_->start(p);
    switch (p.outcome.action) {
      case tensor_action::drop: return;
      case tensor_action::latest:
      case tensor_action::first: copy_one(p); break;
      case tensor_action::average: average(p); break;
    }
    account(p);
  }

  uint64_t bytes_read() const { return bytes_read_; }

 private:
  // Lane l's writer for tensor p: checked, written, and (lane 0's) shown as progress.
  chunk_writer writer(size_t l, const tensor_plan& p) {
    return [this, &p, l](const void* data, uint64_t bytes) {
      check_finite(p, data, bytes);
      lanes_[l].write(data, bytes);
      if (l == 0) step(p, bytes);
    };
  }

  void average(const tensor_plan& p) {
    if (fn_) return custom_average(p, writer(0, p));
    const bool native = std::all_of(lanes_.begin(), lanes_.end(),
                                    [&p](const fold_lane& l) { return native_average_covers(*l.config, p); });
    if (native && !is_integer_average(p)) {
      std::vector<fold_lane> checked;
      for (size_t l = 0; l < lanes_.size(); ++l) checked.push_back(fold_lane{lanes_[l].config, writer(l, p)});
      return native_average(checked, p, ahead_);
    }
    for (size_t l = 0; l < lanes_.size(); ++l) {
      if (is_integer_average(p))
        integer_average(*lanes_[l].config, p, writer(l, p));
      else
        aten_average(*lanes_[l].config, p, writer(l, p));
    }
  }

  const std::string& path_of(size_t input) const { return in_.checkpoints[input].path; }
  const std::string& resume_path() const { return in_.resume->sd.path; }

  void check_finite(const tensor_plan& p, const void* data, uint64_t bytes) {
    const dtype t = p.outcome.output_type;
    if (c_.allow_nonfinite || count_nonfinite(t, data, static_cast<int64_t>(bytes / itemsize(t))) == 0) return;
    std::vector<std::string> where;
    for (const auto& s : p.sources)
      if (int64_t bad = count_nonfinite(*s.view)) where.push_back(fmt::format("{} ({} values)", path_of(s.input), bad));
    if (p.resumed)
      if (int64_t bad = count_nonfinite(*p.resumed)) where.push_back(fmt::format("{} ({} values)", resume_path(), bad));
    const std::string list =
        where.empty() ? "none of the inputs: the average overflowed" : fmt::format("{}", fmt::join(where, ", "));
    throw input_error(fmt::format(
        "tensor '{}' has NaN or Inf values in {}; pass --allow-nonfinite to average them anyway", p.name, list));
  }

  // The tensor --int error compares the others with, and the file it came from.
  const tensor_view* chosen(const tensor_plan& p) const {
    const bool first = p.outcome.action == tensor_action::first;
    if (first && p.resumed) return p.resumed;
    if (!p.sources.empty()) return first ? p.sources.front().view : p.sources.back().view;
    return p.resumed;
  }

  void check_same_ints(const tensor_plan& p, const tensor_view& v, const uint8_t* data) const {
    const auto from = std::find_if(p.sources.begin(), p.sources.end(), [&v](const auto& s) { return s.view == &v; });
    const std::string& origin = from != p.sources.end() ? path_of(from->input) : resume_path();
    for (const auto& s : p.sources) {
      std::vector<uint8_t> other_copy;
      if (!same_values(v.type, contiguous_data(*s.view, other_copy), data, v.numel()))
        throw mismatch_error(fmt::format(
            "{}: integer tensor '{}' differs from {}; --int error forbids that (use --int latest or --int first)",
            path_of(s.input), p.name, origin));
    }
  }

  void copy_one(const tensor_plan& p) {
    const tensor_view& v = *chosen(p);
    std::vector<uint8_t> copy;
    const uint8_t* data = contiguous_data(v, copy);
    const int64_t n = v.numel();
    if (c_.ints == int_policy::error && p.outcome.reason == outcome_reason::ints) check_same_ints(p, v, data);
    const dtype out = p.outcome.output_type;
    if (out != v.type) {
      std::vector<uint8_t> converted(static_cast<size_t>(n) * itemsize(out));
      if (!native_convert(v.type, data, out, converted.data(), n))
        throw std::logic_error(fmt::format("no conversion from {} to {}", dtype_name(v.type), dtype_name(out)));
      copy.swap(converted);
      data = copy.data();
    }
    const uint64_t bytes = static_cast<uint64_t>(n) * itemsize(out);
    check_finite(p, data, bytes);
    for (const auto& lane : lanes_) lane.write(data, bytes);
  }

  void account(const tensor_plan& p) {
    uint64_t bytes = 0;
    for (const auto& s : p.sources) {
      bytes += s.view->nbytes();
      release_pages(*s.view);
    }
    bytes_read_ += bytes;
    bar_.advance(bytes - std::min(bytes, shown_), 1);
    shown_ = written_ = 0;
  }

  // The progress within a large tensor: its inputs' bytes in proportion to its output written.
  void step(const tensor_plan& p, uint64_t bytes) {
    if (p.sources.empty()) return;
    const uint64_t out = static_cast<uint64_t>(p.sources.front().view->numel()) * itemsize(p.outcome.output_type);
    written_ += bytes;
    if (out == 0 || written_ >= out) return;
    uint64_t in = 0;
    for (const auto& s : p.sources) in += s.view->nbytes();
    const auto due =
        static_cast<uint64_t>(static_cast<double>(in) * static_cast<double>(written_) / static_cast<double>(out));
    if (due > shown_) bar_.advance(due - shown_);
    shown_ = std::max(shown_, due);
  }

  // --avg-fn computes each tensor here; --multi-avg-fn's results were computed before, in this order.
  void custom_average(const tensor_plan& p, const chunk_writer& write) {
    if (c_.avg_fn->kind == avg_fn_kind::avg_fn) return fn_->average(c_, p, write);
    const tensor_view& v = fn_results_.at(&p);
    write(v.data(), v.nbytes());
  }

  const fold_config& c_;  // lane 0's: what every lane shares (allow_nonfinite, ints, avg_fn)
  std::vector<fold_lane> lanes_;
  const fold_inputs& in_;
  progress& bar_;
  prefetcher* ahead_;
  avg_function* fn_;
  std::unordered_map<const tensor_plan*, tensor_view> fn_results_;  // --multi-avg-fn's, by tensor
  uint64_t bytes_read_ = 0;
  uint64_t written_ = 0, shown_ = 0;  // of the tensor being folded: output bytes written, input bytes shown
};

// Hands the job to swavg-torch (in the binary without LibTorch) before anything is written when a
// tensor needs ATen.
void require_kernels(const fold_config& c, const fold_plan& plan) {
  for (const auto& p : plan.tensors) {
    if (p.outcome.action != tensor_action::average || is_integer_average(p)) continue;
    if (const auto gap = native_average_gap(c, p))
      require_libtorch(fmt::format("averaging tensor '{}' ({} accumulated in {} on {}: {})", p.name,
                                   dtype_name(p.outcome.input_type), dtype_name(p.outcome.accumulate_type),
                                   device_name(c.device), *gap));
  }
}

}  // namespace

void require_lerp_kernels(const fold_config& c) {
  if (c.mode != fold_mode::swa && !lerp_form_for(dtype::float32, dtype::float32))
    require_libtorch(fmt::format("{} (ATen's lerp: swavg's kernels know no lerp form of LibTorch {})",
                                 c.mode == fold_mode::ema ? "ema" : "average --weights", SWAVG_LIBTORCH_VERSION));
}

namespace {

std::vector<tensor_spec> output_specs(const fold_config& c, const fold_plan& plan,
                                      const std::vector<std::optional<size_t>>& ties,
                                      std::vector<size_t>& spec_tensor) {
  std::vector<tensor_spec> specs;
  specs.reserve(plan.tensors.size() + 1);
  spec_tensor.reserve(plan.tensors.size() + 1);
  std::vector<size_t> spec_of(plan.tensors.size());
  const std::string prefix = c.layout == output_layout::averaged_model ? kModulePrefix : "";
  for (size_t k = 0; k < plan.tensors.size(); ++k) {
    const tensor_plan& p = plan.tensors[k];
    if (p.outcome.action == tensor_action::drop) continue;
    spec_of[k] = specs.size();
    std::optional<size_t> alias;
    if (ties[k]) alias = spec_of[*ties[k]];
    specs.push_back(tensor_spec{prefix + p.name, p.outcome.output_type, shape_of(p), alias});
    spec_tensor.push_back(k);
  }
  if (c.layout == output_layout::averaged_model) {
    specs.push_back(tensor_spec{kNAveraged, dtype::int64, {}, std::nullopt});
    spec_tensor.push_back(plan.tensors.size());
  }
  if (specs.empty()) throw usage_error("every tensor was dropped by the rules: nothing to write");
  return specs;
}

// The tensors the fold averages (not tied to an earlier one), in plan order.
std::vector<const tensor_plan*> averaged_tensors(const fold_plan& plan,
                                                 const std::vector<std::optional<size_t>>& ties) {
  std::vector<const tensor_plan*> out;
  for (size_t k = 0; k < plan.tensors.size(); ++k)
    if (plan.tensors[k].outcome.action == tensor_action::average && !ties[k]) out.push_back(&plan.tensors[k]);
  return out;
}

}  // namespace

resume_record make_resume_record(const fold_config& c, const fold_plan& plan, const fold_inputs& in) {
  resume_record r;
  r.mode = c.mode;
  r.n = plan.n;
  if (c.mode == fold_mode::ema) {
    r.decay = c.decay;
    r.warmup = c.warmup;
    if (c.power_ema) {
      r.power_sigma_rel = c.power_ema->sigma_rel;
      r.last_t = c.power_ema->times.empty() ? c.power_ema->start_time : c.power_ema->times.back();
    }
  }
  for (const auto& p : plan.tensors) {
    if (p.outcome.action == tensor_action::drop) continue;
    if (p.outcome.count != plan.n) r.counts.emplace_back(p.name, p.outcome.count);
    r.accumulate_differs |= p.outcome.accumulate_type != p.outcome.output_type;
  }
  r.layout = c.layout;
  r.avg_fn = c.avg_fn;
  r.weights = normalised_weights(c);
  r.weights_recipe = c.weights_recipe;
  r.selection = c.selection;
  // The checkpoints in the average: a resumed one's, then this run's, so that a rolling average's
  // record reads as the one run over all of them would.
  if (in.resume) r.inputs = in.resume->record.inputs;
  for (const auto& sd : in.checkpoints) r.inputs.push_back(sd.path);
  return r;
}

namespace {

// Sharded outputs hold tensors only (each shard file is read alone, so they share no storages).
void check_sharded_objects(const fold_target& target, const std::vector<carried_entry>& carried) {
  if (!target.folder || target.drop_objects || carried.empty()) return;
  std::vector<std::string> names;
  for (const auto& e : carried) names.push_back(fmt::format("{} ({})", e.entry.name, e.entry.type));
  throw usage_error(
      fmt::format("a folder output (-o DIR/) holds tensors only, not the non-tensor entries {}; pass "
                  "--drop-objects to leave them out",
                  quoted_list(names)));
}

}  // namespace

fold_outline outline_fold(const fold_config& c, const fold_inputs& in, const fold_target& target) {
  // The plan: every input checked against the others, before anything is written.
  fold_outline o;
  o.plan = plan_fold(c, in.checkpoints, in.resume ? &*in.resume : nullptr, in.model_kinds);
  const fold_plan& plan = o.plan;
  if (!c.avg_fn) require_kernels(c, plan);

  // The output's tensors: safetensors has no shared storages, nor have shards: tied tensors are
  // written out each. Then the entries carried beside them and the metadata.
  o.ties = target.format == output_format::torch && !target.folder
               ? find_ties(plan)
               : std::vector<std::optional<size_t>>(plan.tensors.size());
  o.specs = output_specs(c, plan, o.ties, o.spec_tensor);
  const state_dict* resumed = in.resume ? &in.resume->sd : nullptr;
  o.carried = plan_carried(in.checkpoints, resumed);
  check_sharded_objects(target, o.carried);
  o.objects_dropped = target.drop_objects && !o.carried.empty();
  if (!target.drop_objects)
    for (const auto& e : o.carried) {
      o.objects.push_back(e.entry);
      if (c.layout == output_layout::averaged_model) rename_entry(o.objects.back(), kModulePrefix + e.entry.name);
    }
  if (target.format == output_format::safetensors) {
    std::vector<const state_dict*> sources{resumed};
    for (const auto& sd : in.checkpoints) sources.push_back(&sd);
    o.metadata = inherited_metadata(sources);
  }
  o.metadata[kResumeKey] = to_json(make_resume_record(c, plan, in));
  return o;
}

fold_result run_fold(const fold_config& c, const fold_inputs& in, const fold_target& target) {
  return run_fold(c, in, outline_fold(c, in, target), target);
}

fold_result run_fold(const fold_config& c, const fold_inputs& in, const fold_outline& outline,
                     const fold_target& target) {
  const fold_plan& plan = outline.plan;
  const std::unique_ptr<avg_function> fn = c.avg_fn ? load_avg_fn(*c.avg_fn) : nullptr;
  const std::vector<std::optional<size_t>>& ties = outline.ties;
  const std::vector<tensor_spec>& specs = outline.specs;
  fold_result result;
  result.carried = outline.carried;
  result.objects_dropped = outline.objects_dropped;
  const std::vector<object_entry>& objects = outline.objects;
  const std::map<std::string, std::string>& metadata = outline.metadata;
  std::unordered_map<const tensor_plan*, tensor_view> fn_results;
  if (fn && c.avg_fn->kind == avg_fn_kind::multi_avg_fn) {
    const std::vector<const tensor_plan*> averaged = averaged_tensors(plan, ties);
    std::vector<tensor_view> views = fn->average_all(c, averaged);
    for (size_t i = 0; i < averaged.size(); ++i) fn_results.emplace(averaged[i], std::move(views.at(i)));
  }

  // The sink: the file, or the folder's shards (a worker's own only).
  std::unique_ptr<tensor_sink> file;
  if (!target.folder) file = std::make_unique<tensor_sink>(target.path, target.format, specs, metadata, objects);
  output_sink& sink = target.folder ? target.folder->open(specs, metadata) : *file;

  // One pass over the plan: the tensors this run folds (not dropped, not tied to an earlier one,
  // the sink's), in order, and the tied ones.
  std::vector<const tensor_plan*> order;
  uint64_t total_bytes = 0;
  size_t spec = 0;  // the tensor's index in `specs`
  for (size_t k = 0; k < plan.tensors.size(); ++k) {
    const tensor_plan& p = plan.tensors[k];
    if (p.outcome.action == tensor_action::drop) continue;
    if (ties[k]) {
      result.tied.push_back(tied_tensor{p.name, plan.tensors[*ties[k]].name});
    } else if (sink.owns(spec)) {
      order.push_back(&p);
      for (const auto& s : p.sources) total_bytes += s.view->nbytes();
    }
    ++spec;
  }

  // The fold.
  progress bar("folding", total_bytes, order.size(), "tensor");
  prefetcher ahead(order);
  const chunk_writer write = [&sink](const void* data, uint64_t bytes) { sink.write(data, bytes); };
  running_average average({fold_lane{&c, write}}, in, bar, &ahead, fn.get(), std::move(fn_results));
  for (const tensor_plan* p : order) average.run(*p);
  if (c.layout == output_layout::averaged_model && sink.owns(spec)) write(&plan.n, sizeof plan.n);
  const std::string name = base_name(target.path).empty() ? target.path : base_name(target.path);
  bar.next("writing " + printable(name), 0);
  sink.commit();

  result.bytes_written = sink.bytes_written();
  result.tensors.reserve(plan.tensors.size());
  for (const auto& p : plan.tensors) result.tensors.push_back(p.outcome);
  result.n = plan.n;
  result.bytes_read = average.bytes_read();
  return result;
}

namespace {

bool same_specs(const std::vector<tensor_spec>& a, const std::vector<tensor_spec>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].type != b[i].type || a[i].shape != b[i].shape || a[i].alias_of != b[i].alias_of)
      return false;
  return true;
}

void check_same_plans(const std::vector<fold_outline>& outlines, const std::vector<fold_target>& targets) {
  const fold_plan& first = outlines.front().plan;
  for (size_t o = 1; o < outlines.size(); ++o) {
    const fold_plan& plan = outlines[o].plan;
    bool same = plan.tensors.size() == first.tensors.size() && same_specs(outlines[o].specs, outlines.front().specs) &&
                targets[o].format == targets.front().format && !targets[o].folder;
    for (size_t k = 0; same && k < plan.tensors.size(); ++k) {
      const tensor_outcome& a = first.tensors[k].outcome;
      const tensor_outcome& b = plan.tensors[k].outcome;
      same = a.action == b.action && a.accumulate_type == b.accumulate_type && a.output_type == b.output_type;
    }
    if (!same)
      throw std::logic_error(fmt::format("{}: its fold is planned unlike the first output's", targets[o].path));
  }
}

}  // namespace

std::vector<fold_result> run_folds(const std::vector<fold_config>& configs, const fold_inputs& in,
                                   const std::vector<fold_outline>& outlines, const std::vector<fold_target>& targets) {
  if (configs.empty() || configs.size() != outlines.size() || configs.size() != targets.size())
    throw std::logic_error("run_folds: one config, outline and target per output");
  check_same_plans(outlines, targets);
  for (const auto& c : configs)
    if (c.avg_fn) throw std::logic_error("run_folds: an averaging function writes one output");
  const fold_outline& first = outlines.front();
  const fold_plan& plan = first.plan;
  std::vector<std::string> paths;
  std::vector<std::map<std::string, std::string>> metadata;
  for (size_t o = 0; o < outlines.size(); ++o) {
    paths.push_back(targets[o].path);
    metadata.push_back(outlines[o].metadata);
  }
  tensor_sinks sinks(paths, targets.front().format, first.specs, metadata, first.objects);

  std::vector<const tensor_plan*> order;
  std::vector<fold_result> results(configs.size());
  uint64_t total_bytes = 0;
  for (size_t k = 0; k < plan.tensors.size(); ++k) {
    const tensor_plan& p = plan.tensors[k];
    if (p.outcome.action == tensor_action::drop) continue;
    if (first.ties[k]) {
      for (auto& r : results) r.tied.push_back(tied_tensor{p.name, plan.tensors[*first.ties[k]].name});
    } else {
      order.push_back(&p);
      for (const auto& s : p.sources) total_bytes += s.view->nbytes();
    }
  }

  progress bar(fmt::format("folding into {} outputs", configs.size()), total_bytes, order.size(), "tensor");
  prefetcher ahead(order);
  std::vector<fold_lane> lanes;
  for (size_t o = 0; o < configs.size(); ++o)
    lanes.push_back(
        fold_lane{&configs[o], [&sinks, o](const void* data, uint64_t bytes) { sinks.write_to(o, data, bytes); }});
  running_average average(lanes, in, bar, &ahead, nullptr, {});
  for (const tensor_plan* p : order) average.run(*p);
  for (size_t o = 0; o < configs.size(); ++o)
    if (configs[o].layout == output_layout::averaged_model) sinks.write_to(o, &outlines[o].plan.n, sizeof plan.n);
  bar.next("writing " + counted(configs.size(), "output"), 0);
  sinks.commit();

  for (size_t o = 0; o < configs.size(); ++o) {
    fold_result& r = results[o];
    r.carried = outlines[o].carried;
    r.objects_dropped = outlines[o].objects_dropped;
    for (const auto& p : outlines[o].plan.tensors) r.tensors.push_back(p.outcome);
    r.n = outlines[o].plan.n;
    r.bytes_read = average.bytes_read();
    r.bytes_written = sinks.bytes_written(o);
  }
  return results;
}

}  // namespace swavg
