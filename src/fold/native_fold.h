/*
 * The arithmetic of one planned tensor's average, streamed in slices: swavg's own kernels
 * (native_kernels.h) where they reproduce ATen bit for bit (the common CPU folds), ATen elsewhere
 * (aten.h: GPUs, complex tensors, half-precision accumulators, a lerp the kernel cannot match),
 * which only the binary that loads LibTorch has.
 */
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fold/config.h"
#include "fold/plan.h"
#include "tensor/tensor_view.h"

namespace swavg {

// Takes one finished slice of a tensor's result (output dtype, contiguous, aligned), in order.
using chunk_writer = std::function<void(const void* data, uint64_t bytes)>;

// The view's elements, contiguous and aligned: the mapping itself when it already is, else a copy
// (whose source pages are then dropped). With `slice`, a pieced view (tensor_view.h) is read one
// slice of that many elements at a time when at() reaches it: in place where the slice lies in one
// piece (range_in_place; then not necessarily aligned, which the kernels allow), else assembled into
// one slice's buffer; release() drops the pieces' pages behind each slice. No copy of the whole
// tensor.
class flat_input {
 public:
  explicit flat_input(const tensor_view& v, int64_t slice = 0)
      : view_(v), slice_(v.pieces ? slice : 0), data_(slice_ > 0 ? nullptr : contiguous_data(v, copy_)) {
    if (slice_ > 0) copy_.resize(static_cast<size_t>(std::min(slice_, v.numel())) * itemsize(v.type));
    if (slice_ == 0 && !copy_.empty()) release_pages(v);
  }
  // Element `element` on; sliced, the slice from there (at most `slice` elements).
  const uint8_t* at(int64_t element) const {
    if (slice_ == 0) return data_ + element * static_cast<int64_t>(itemsize(view_.type));
    const int64_t count = std::min(slice_, view_.numel() - element);
    if (const uint8_t* in_place = range_in_place(view_, element, count)) return in_place;
    gather_range(view_, element, count, copy_.data());
    return copy_.data();
  }
  // Drops the mapped pages behind elements [begin, begin + length) once they have been used.
  void release(int64_t begin, int64_t length) const {
    if (slice_ == 0 && !copy_.empty()) return;
    const uint64_t item = itemsize(view_.type);
    release_pages(view_, (static_cast<uint64_t>(view_.offset) + begin) * item, static_cast<uint64_t>(length) * item);
  }

 private:
  const tensor_view& view_;
  int64_t slice_;
  mutable std::vector<uint8_t> copy_;  // before data_, which may point into it; sliced, the slice
  const uint8_t* data_;
};

// Whether swavg's own kernels compute this plan's average, and doing it. The gap says why not
// (nullopt: they do), in words for a message: "on cuda", "a lerp weight of exactly 1, ...".
std::optional<std::string> native_average_gap(const fold_config& c, const tensor_plan& p);
bool native_average_covers(const fold_config& c, const tensor_plan& p);
class prefetcher;
// `ahead`, when given, is told after each slice how far the inputs have been read.
void native_average(const fold_config& c, const tensor_plan& p, const chunk_writer& write, prefetcher* ahead = nullptr);

// One output of a fold that writes several from one read of the inputs (execute.h's run_folds): its
// configuration, which differs from the others' in its schedule only, and where its slices go.
struct fold_lane {
  const fold_config* config = nullptr;
  chunk_writer write;
};
// The same for every lane at once: each slice of each input is read once and folded into every
// lane's accumulator with exactly the steps a fold of that lane alone takes, so each output has the
// bits of its own run. Every lane must be covered (native_average_covers).
void native_average(const std::vector<fold_lane>& lanes, const tensor_plan& p, prefetcher* ahead = nullptr);

}  // namespace swavg
