#include "fold/posthoc.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <memory>
#include <stdexcept>

#include "fold/config.h"
#include "fold/entries.h"
#include "fold/native_fold.h"
#include "fold/native_kernels.h"
#include "util/error.h"
#include "util/progress.h"

namespace swavg {
namespace {

void convert_or_fail(dtype from, const void* src, dtype to, void* dst, int64_t n, const std::string& name) {
  if (!native_convert(from, src, to, dst, n))
    throw usage_error(fmt::format("tensor '{}': no conversion from {} to {} for post-hoc EMA", name, dtype_name(from),
                                  dtype_name(to)));
}

// Every output's file (formats/file/save.h): each with the metadata inherited and its own.
std::unique_ptr<tensor_sinks> open_outputs(const std::vector<posthoc_output>& outputs, output_format format,
                                           const std::vector<tensor_spec>& specs,
                                           const std::map<std::string, std::string>& inherited,
                                           const std::vector<object_entry>& objects) {
  std::vector<std::string> paths;
  std::vector<std::map<std::string, std::string>> metadata;
  for (const auto& o : outputs) {
    paths.push_back(o.path);
    metadata.push_back(inherited);
    for (const auto& [k, v] : o.metadata) metadata.back()[k] = v;
  }
  return std::make_unique<tensor_sinks>(paths, format, specs, metadata, objects);
}

int64_t count_nonfinite(const tensor_view& v) {
  std::vector<uint8_t> copy;
  return count_nonfinite(v.type, contiguous_data(v, copy), v.numel());
}

// Computes each planned tensor of every output into the outputs' sink. Unless allow_nonfinite, NaN
// or Inf in a snapshot that counts (a non-zero coefficient for some output; the last one for the
// tensors copied from it) or in an output is an input_error, as in `average`.
class posthoc_writer {
 public:
  posthoc_writer(const std::vector<state_dict>& snapshots, const std::vector<posthoc_output>& outputs,
                 tensor_sinks& sink, bool allow_nonfinite)
      : snapshots_(snapshots), outputs_(outputs), sink_(sink), allow_nonfinite_(allow_nonfinite) {}

  // Returns the bytes read.
  uint64_t run(const tensor_plan& p) {
    if (p.outcome.action == tensor_action::average)
      combine(p);
    else
      copy_last(p);
    uint64_t bytes = 0;
    for (const auto& s : p.sources) {
      bytes += s.view->nbytes();
      release_pages(*s.view);
    }
    bytes_read_ += bytes;
    return bytes;
  }

  uint64_t bytes_read() const { return bytes_read_; }

 private:
  // Whether snapshot `input` enters any output of the combination.
  bool counts(size_t input) const {
    for (const auto& o : outputs_)
      if (o.coefficients[input] != 0) return true;
    return false;
  }

  // `copied`: the tensor is the last snapshot's, else their combination.
  [[noreturn]] void refuse_nonfinite(const tensor_plan& p, bool copied) const {
    std::vector<std::string> where;
    for (const auto& s : p.sources)
      if (copied ? &s == &p.sources.back() : counts(s.input))
        if (const int64_t bad = count_nonfinite(*s.view))
          where.push_back(fmt::format("{} ({} values)", snapshots_[s.input].path, bad));
    throw input_error(
        fmt::format("tensor '{}' has NaN or Inf values in {}; pass --allow-nonfinite to combine them anyway", p.name,
                    fmt::join(where, ", ")));
  }

  void copy_last(const tensor_plan& p) {
    const tensor_view& v = *p.sources.back().view;
    std::vector<uint8_t> copy;
    const uint8_t* data = contiguous_data(v, copy);
    if (!allow_nonfinite_ && count_nonfinite(v.type, data, v.numel()) != 0) refuse_nonfinite(p, true);
    const dtype out = p.outcome.output_type;
    std::vector<uint8_t> converted;
    if (out != v.type) {
      converted.resize(static_cast<size_t>(v.numel()) * itemsize(out));
      convert_or_fail(v.type, data, out, converted.data(), v.numel(), p.name);
      data = converted.data();
    }
    sink_.write(data, static_cast<uint64_t>(v.numel()) * itemsize(out));
  }

  void combine(const tensor_plan& p) {
    const int64_t numel = p.sources.front().view->numel();
    const int64_t chunk = std::min<int64_t>(kFoldChunkElements, std::max<int64_t>(numel, 1));
    const size_t outs = outputs_.size();
    const dtype out_type = p.outcome.output_type;
    std::vector<double> acc(outs * static_cast<size_t>(chunk));
    std::vector<double> widened(static_cast<size_t>(chunk));
    std::vector<uint8_t> rounded(static_cast<size_t>(chunk) * itemsize(out_type));
    std::vector<flat_input> flats;
    flats.reserve(p.sources.size());
    for (const auto& s : p.sources) flats.emplace_back(*s.view, chunk);

    for (int64_t begin = 0; begin < numel; begin += chunk) {
      const int64_t length = std::min(chunk, numel - begin);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (size_t j = 0; j < p.sources.size(); ++j) {
        const size_t input = p.sources[j].input;
        if (!counts(input)) {  // 0 x NaN would still be NaN: a snapshot that does not count is not read
          flats[j].release(begin, length);
          continue;
        }
        convert_or_fail(p.sources[j].view->type, flats[j].at(begin), dtype::float64, widened.data(), length, p.name);
        if (!allow_nonfinite_ && count_nonfinite(dtype::float64, widened.data(), length) != 0)
          refuse_nonfinite(p, false);
        for (size_t s = 0; s < outs; ++s) {
          const double x = outputs_[s].coefficients[input];
          if (x == 0) continue;
          double* a = acc.data() + s * static_cast<size_t>(chunk);
          for (int64_t e = 0; e < length; ++e) a[e] += x * widened[static_cast<size_t>(e)];
        }
        flats[j].release(begin, length);
      }
      for (size_t s = 0; s < outs; ++s) {
        convert_or_fail(dtype::float64, acc.data() + s * static_cast<size_t>(chunk), out_type, rounded.data(), length,
                        p.name);
        if (!allow_nonfinite_ && count_nonfinite(out_type, rounded.data(), length) != 0)
          throw input_error(fmt::format(
              "tensor '{}': its combination for {} has NaN or Inf values though no snapshot has: it overflowed {}; "
              "pass --allow-nonfinite to write it anyway",
              p.name, outputs_[s].path, dtype_name(out_type)));
        sink_.write_to(s, rounded.data(), static_cast<uint64_t>(length) * itemsize(out_type));
      }
    }
  }

  const std::vector<state_dict>& snapshots_;
  const std::vector<posthoc_output>& outputs_;
  tensor_sinks& sink_;
  bool allow_nonfinite_;
  uint64_t bytes_read_ = 0;
};

std::vector<tensor_spec> specs_of(const fold_plan& plan) {
  std::vector<tensor_spec> specs;
  for (const auto& p : plan.tensors)
    specs.push_back(tensor_spec{p.name, p.outcome.output_type, p.sources.front().view->shape, std::nullopt});
  if (specs.empty()) throw usage_error("the snapshots hold no tensors: nothing to write");
  return specs;
}

}  // namespace

posthoc_outline outline_posthoc(const std::vector<state_dict>& snapshots, const std::vector<posthoc_output>& outputs,
                                output_format format, std::optional<dtype> output_dtype, bool drop_objects) {
  fold_config c;  // the planner's defaults: floating tensors averaged, buffers and integers the latest
  c.output_dtype = output_dtype;
  posthoc_outline o;
  o.plan = plan_fold(c, snapshots, nullptr);
  for (const auto& out : outputs)
    if (out.coefficients.size() != snapshots.size())
      throw std::logic_error(
          fmt::format("{}: {} coefficients for {} snapshots", out.path, out.coefficients.size(), snapshots.size()));
  o.specs = specs_of(o.plan);
  const std::vector<carried_entry> carried = plan_carried(snapshots, nullptr);
  if (!drop_objects)
    for (const auto& e : carried) o.objects.push_back(e.entry);
  o.objects_dropped = drop_objects && !carried.empty();
  check_objects_fit(outputs.front().path, format, o.objects);
  if (format == output_format::safetensors) {
    std::vector<const state_dict*> sources;
    for (const auto& sd : snapshots) sources.push_back(&sd);
    o.inherited = inherited_metadata(sources);
  }
  return o;
}

uint64_t posthoc_working_set(const tensor_plan& p, size_t outputs) {
  const tensor_view& last = *p.sources.back().view;
  const uint64_t out_item = itemsize(p.outcome.output_type);
  if (p.outcome.action != tensor_action::average)
    return last.nbytes() * (last.is_contiguous() ? 1 : 2) +
           (p.outcome.output_type != last.type ? static_cast<uint64_t>(last.numel()) * out_item : 0);
  const uint64_t numel = static_cast<uint64_t>(last.numel());
  const uint64_t chunk = std::min<uint64_t>(static_cast<uint64_t>(kFoldChunkElements), std::max<uint64_t>(numel, 1));
  uint64_t bytes = (outputs + 1) * chunk * sizeof(double) + chunk * out_item;
  for (const auto& s : p.sources)
    bytes += s.view->is_contiguous() ? std::min(chunk * itemsize(s.view->type), s.view->nbytes()) : s.view->nbytes();
  return bytes;
}

posthoc_result run_posthoc(const std::vector<state_dict>& snapshots, const std::vector<posthoc_output>& outputs,
                           output_format format, std::optional<dtype> output_dtype, bool drop_objects,
                           bool allow_nonfinite) {
  return run_posthoc(snapshots, outputs, outline_posthoc(snapshots, outputs, format, output_dtype, drop_objects),
                     format, allow_nonfinite);
}

posthoc_result run_posthoc(const std::vector<state_dict>& snapshots, const std::vector<posthoc_output>& outputs,
                           const posthoc_outline& outline, output_format format, bool allow_nonfinite) {
  const fold_plan& plan = outline.plan;
  posthoc_result result;
  result.objects_dropped = outline.objects_dropped;
  const std::unique_ptr<tensor_sinks> outputs_sink =
      open_outputs(outputs, format, outline.specs, outline.inherited, outline.objects);
  tensor_sinks& sink = *outputs_sink;
  uint64_t total = 0;
  for (const auto& p : plan.tensors)
    for (const auto& s : p.sources) total += s.view->nbytes();
  progress bar("post-hoc EMA", total, plan.tensors.size(), "tensor");
  posthoc_writer writer(snapshots, outputs, sink, allow_nonfinite);
  for (const auto& p : plan.tensors) bar.advance(writer.run(p), 1);
  bar.next("writing", 0);
  sink.commit();
  for (const auto& p : plan.tensors) result.tensors.push_back(p.outcome);
  result.bytes_read = writer.bytes_read();
  result.bytes_written = sink.bytes_written();
  return result;
}

}  // namespace swavg
