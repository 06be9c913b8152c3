/*
 * Averages a tensor across the inputs with swavg's own kernels (native_kernels.h), slice by slice:
 * each slice of the accumulator is filled from the first input (or the resumed average), folded
 * with the same slice of every other input, converted to the output dtype and written; the input
 * pages behind it are dropped. A tensor in pieces (DCP chunks, ZeRO-3 slices) is assembled slice by
 * slice too. Each element is computed alone, so slicing changes no bit.
 */
#include "fold/native_fold.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "fold/native_kernels.h"
#include "fold/prefetch.h"
#include "fold/schedule.h"
#include "util/error.h"

namespace swavg {
namespace {

void check(bool ok, const tensor_plan& p, const char* step) {
  if (!ok) throw std::logic_error(fmt::format("{} of tensor '{}' is not covered by the native kernels", step, p.name));
}

}  // namespace

std::optional<std::string> native_average_gap(const fold_config& c, const tensor_plan& p) {
  const dtype acc = p.outcome.accumulate_type;
  if (!c.device.is_cpu()) return "on " + device_name(c.device);
  if (!is_native_accumulator(acc)) return fmt::format("accumulated in {}", dtype_name(acc));
  if (!is_floating(p.outcome.output_type)) return fmt::format("written as {}", dtype_name(p.outcome.output_type));
  if (p.resumed && !is_floating(p.resumed->type)) return fmt::format("resumed from {}", dtype_name(p.resumed->type));
  for (const auto& s : p.sources) {
    const dtype in = s.view->type;
    if (!is_floating(in)) return fmt::format("a {} input", dtype_name(in));
    if (c.mode == fold_mode::swa ? (acc == dtype::float32 && in == dtype::float64) : !lerp_form_for(acc, in))
      return fmt::format("{} into a {} accumulator", dtype_name(in), dtype_name(acc));
  }
  if (c.mode == fold_mode::swa) return std::nullopt;
  const std::vector<double> weights = lerp_weights(c, p);
  for (size_t j = 0; j < p.sources.size(); ++j)
    if (weights[j] != 0.0 && !native_lerp_reproduces(acc, *lerp_form_for(acc, p.sources[j].view->type), weights[j]))
      return "a lerp weight of exactly 1, where ATen 2.x's vector lanes and tails differ";
  return std::nullopt;
}

bool native_average_covers(const fold_config& c, const tensor_plan& p) { return !native_average_gap(c, p); }

void native_average(const fold_config& c, const tensor_plan& p, const chunk_writer& write, prefetcher* ahead) {
  native_average({fold_lane{&c, write}}, p, ahead);
}

namespace {

// One lane's state: its accumulator and output slices, its lerp forms and weights.
struct lane_state {
  const fold_config* c;
  std::vector<uint8_t> acc, out;
  std::vector<std::optional<lerp_form>> forms;
  std::vector<double> weights;
};

lane_state lane_for(const fold_config& c, const tensor_plan& p, int64_t chunk) {
  const dtype acc_type = p.outcome.accumulate_type;
  const dtype out_type = p.outcome.output_type;
  lane_state s{&c,
               std::vector<uint8_t>(static_cast<size_t>(chunk) * itemsize(acc_type)),
               std::vector<uint8_t>(out_type == acc_type ? 0 : static_cast<size_t>(chunk) * itemsize(out_type)),
               {},
               c.mode == fold_mode::swa ? std::vector<double>() : lerp_weights(c, p)};
  for (const auto& src : p.sources)
    s.forms.push_back(c.mode == fold_mode::swa ? std::nullopt : lerp_form_for(acc_type, src.view->type));
  return s;
}

// Folds input j's slice `x` (the k-th checkpoint of the average) into one lane's accumulator.
void fold_step(lane_state& s, const tensor_plan& p, size_t j, const void* x, int64_t length, int64_t k) {
  const dtype acc_type = p.outcome.accumulate_type;
  const dtype in_type = p.sources[j].view->type;
  if (k == 0) {
    check(native_convert(in_type, x, acc_type, s.acc.data(), length), p, "copying");
  } else if (s.c->mode == fold_mode::swa) {
    check(native_swa_step(acc_type, s.acc.data(), in_type, x, length, k + 1), p, "the SWA step");
  } else {
    check(s.forms[j] && native_lerp_reproduces(acc_type, *s.forms[j], s.weights[j]) &&
              native_lerp_step(acc_type, s.acc.data(), in_type, x, length, s.weights[j], *s.forms[j]),
          p, "the lerp step");
  }
}

void write_slice(lane_state& s, const fold_lane& lane, const tensor_plan& p, int64_t length) {
  const dtype acc_type = p.outcome.accumulate_type;
  const dtype out_type = p.outcome.output_type;
  if (out_type == acc_type) {
    lane.write(s.acc.data(), static_cast<uint64_t>(length) * itemsize(acc_type));
  } else {
    check(native_convert(acc_type, s.acc.data(), out_type, s.out.data(), length), p, "the output conversion");
    lane.write(s.out.data(), static_cast<uint64_t>(length) * itemsize(out_type));
  }
}

}  // namespace

void native_average(const std::vector<fold_lane>& lanes, const tensor_plan& p, prefetcher* ahead) {
  const int64_t numel = p.sources.empty() ? p.resumed->numel() : p.sources.front().view->numel();
  const int64_t chunk = std::min<int64_t>(kFoldChunkElements, std::max<int64_t>(numel, 1));
  std::vector<flat_input> flats;
  flats.reserve(p.sources.size());
  for (const auto& s : p.sources) flats.emplace_back(*s.view, chunk);
  std::optional<flat_input> resumed;
  if (p.resumed) resumed.emplace(*p.resumed, chunk);
  std::vector<lane_state> states;
  for (const auto& lane : lanes) states.push_back(lane_for(*lane.config, p, chunk));

  for (int64_t begin = 0; begin < numel; begin += chunk) {
    const int64_t length = std::min(chunk, numel - begin);
    int64_t k = 0;
    if (resumed) {
      for (auto& s : states)
        check(native_convert(p.resumed->type, resumed->at(begin), p.outcome.accumulate_type, s.acc.data(), length), p,
              "resuming");
      k = p.resumed_count;
    }
    for (size_t j = 0; j < flats.size(); ++j, ++k) {
      const void* x = flats[j].at(begin);
      for (auto& s : states) fold_step(s, p, j, x, length, k);
      flats[j].release(begin, length);
    }
    if (ahead) ahead->advance(p, begin + length);
    for (size_t l = 0; l < lanes.size(); ++l) write_slice(states[l], lanes[l], p, length);
  }
}

}  // namespace swavg
