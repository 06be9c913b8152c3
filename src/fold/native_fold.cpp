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
  const dtype acc_type = p.outcome.accumulate_type;
  const dtype out_type = p.outcome.output_type;
  std::vector<flat_input> flats;
  flats.reserve(p.sources.size());
  const int64_t numel = p.sources.empty() ? p.resumed->numel() : p.sources.front().view->numel();
  const int64_t chunk = std::min<int64_t>(kFoldChunkElements, std::max<int64_t>(numel, 1));
  for (const auto& s : p.sources) flats.emplace_back(*s.view, chunk);
  std::optional<flat_input> resumed;
  if (p.resumed) resumed.emplace(*p.resumed, chunk);
  std::vector<uint8_t> acc(static_cast<size_t>(chunk) * itemsize(acc_type));
  std::vector<uint8_t> out(out_type == acc_type ? 0 : static_cast<size_t>(chunk) * itemsize(out_type));
  std::vector<std::optional<lerp_form>> forms;
  for (const auto& s : p.sources)
    forms.push_back(c.mode == fold_mode::swa ? std::nullopt : lerp_form_for(acc_type, s.view->type));
  const std::vector<double> weights = c.mode == fold_mode::swa ? std::vector<double>() : lerp_weights(c, p);

  for (int64_t begin = 0; begin < numel; begin += chunk) {
    const int64_t length = std::min(chunk, numel - begin);
    int64_t k = 0;
    if (resumed) {
      check(native_convert(p.resumed->type, resumed->at(begin), acc_type, acc.data(), length), p, "resuming");
      k = p.resumed_count;
    }
    for (size_t j = 0; j < flats.size(); ++j) {
      const dtype in_type = p.sources[j].view->type;
      const void* x = flats[j].at(begin);
      if (k == 0) {
        check(native_convert(in_type, x, acc_type, acc.data(), length), p, "copying");
      } else if (c.mode == fold_mode::swa) {
        check(native_swa_step(acc_type, acc.data(), in_type, x, length, k + 1), p, "the SWA step");
      } else {
        check(forms[j] && native_lerp_reproduces(acc_type, *forms[j], weights[j]) &&
                  native_lerp_step(acc_type, acc.data(), in_type, x, length, weights[j], *forms[j]),
              p, "the lerp step");
      }
      ++k;
      flats[j].release(begin, length);
    }
    if (ahead) ahead->advance(p, begin + length);
    if (out_type == acc_type) {
      write(acc.data(), static_cast<uint64_t>(length) * itemsize(acc_type));
    } else {
      check(native_convert(acc_type, acc.data(), out_type, out.data(), length), p, "the output conversion");
      write(out.data(), static_cast<uint64_t>(length) * itemsize(out_type));
    }
  }
}

}  // namespace swavg
