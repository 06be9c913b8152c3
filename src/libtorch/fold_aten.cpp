/*
 * The fold steps on ATen tensors, for what swavg's own kernels do not cover: GPUs (--device cuda),
 * complex tensors, half-precision accumulators (--accumulate native on float16/bfloat16), and a
 * lerp whose rounding the native kernel cannot reproduce. The expressions are AveragedModel's and
 * get_ema_multi_avg_fn's, run by the same ATen kernels, so results equal PyTorch's. Only the binary
 * that loads LibTorch has this file; it also answers lerp_form_for by probing at::lerp.
 */
#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <spdlog/spdlog.h>

#include <array>
#include <cmath>
#include <cstring>
#include <mutex>

#include "fold/aten.h"
#include "fold/native_kernels.h"
#include "fold/schedule.h"
#include "libtorch/tensor_bridge.h"
#include "util/error.h"
#include "util/version.h"

namespace swavg {

namespace {

// A flat 1-D slice [begin, begin + length) of a contiguous tensor, on `device`.
at::Tensor chunk_of(const at::Tensor& flat, int64_t begin, int64_t length, const at::Device& device) {
  at::Tensor c = flat.narrow(0, begin, length);
  return device.is_cpu() ? c : c.to(device);
}

// PyTorch 2.x's AveragedModel folds floating-point (and complex) tensors on the devices with
// foreach kernels through get_swa_multi_avg_fn; on the CPU, and everywhere in 1.13, it keeps
// avg + (x - avg) / (n + 1).
bool foreach_swa(const at::Device& device, const at::Tensor& acc) {
  return SWAVG_LIBTORCH_VERSION_MAJOR >= 2 && device.is_cuda() && (acc.is_floating_point() || acc.is_complex());
}

#if SWAVG_LIBTORCH_VERSION_MAJOR >= 2
// 1 / (n_averaged + 1) as get_swa_multi_avg_fn computes it: an int64 tensor divided into 1, which
// true division gives as float32.
at::Scalar swa_lerp_weight(int64_t k) { return static_cast<double>(1.0f / static_cast<float>(k + 1)); }
#endif

at::Tensor flat_tensor(const tensor_view& v) {
  at::Tensor t = to_tensor(v);
  return (v.is_contiguous() ? t : t.contiguous()).reshape({-1});
}

// Values that separate the candidate lerp forms: mixed signs and magnitudes (some overflowing
// 16-bit types), zeros of both signs, near-equal pairs, weights on both branches; and enough of them
// for ATen to split the work between threads, so that every vector tail it leaves is probed too.
// Weights a form does not reproduce (native_lerp_reproduces: 2.x at w = 1) are left out here and
// computed by ATen in the fold.
bool probe_lerp(dtype acc_type, dtype in_type, lerp_form form) {
  constexpr int64_t kProbe = 100003;
  std::vector<double> a(kProbe), b(kProbe);
  uint64_t state = 0x9e3779b97f4a7c15ull;
  auto next = [&state]() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  auto unit = [&next]() { return static_cast<double>(next() >> 11) / 9007199254740992.0 - 0.5; };
  for (int64_t i = 0; i < kProbe; ++i) {
    const int scale = static_cast<int>(next() % 61) - 30;
    a[i] = std::ldexp(unit(), scale);
    b[i] = (i % 7 == 0) ? a[i] * (1 + std::ldexp(unit(), -20))
                        : std::ldexp(unit(), scale + static_cast<int>(next() % 5) - 2);
    if (i % 11 == 0) a[i] = 0.0;
    if (i % 13 == 5) b[i] = -0.0;
    if (i % 17 == 3) a[i] = -0.0;
    if (i % 29 == 7 || i >= kProbe - 2) a[i] = b[i] = -0.0;  // at w = 1 the forms differ only in this zero's sign
  }
  const auto options = at::TensorOptions().dtype(at::kDouble);
  const at::Tensor start = at::from_blob(a.data(), {kProbe}, options).to(to_scalar_type(acc_type));
  const at::Tensor end = at::from_blob(b.data(), {kProbe}, options).to(to_scalar_type(in_type));
  // The whole probe, and a short one that ATen runs in its scalar tail loop alone.
  for (int64_t n : {kProbe, int64_t{15}}) {
    const at::Tensor s = start.narrow(0, 0, n);
    const at::Tensor e = end.narrow(0, 0, n).contiguous();
    for (double w : {1e-3, 0.1, 0.3, 0.4999, 0.5, 0.7, 0.9, 0.999, 1.0 - 0x1p-24, 1.0}) {
      if (!native_lerp_reproduces(acc_type, form, w)) continue;
      at::Tensor expected = s.clone().lerp_(e.to(s.scalar_type()), w);
      at::Tensor got = s.clone();
      if (!native_lerp_step(acc_type, got.data_ptr(), in_type, e.data_ptr(), n, w, form)) return false;
      if (std::memcmp(expected.data_ptr(), got.data_ptr(), got.nbytes()) != 0) return false;
    }
  }
  return true;
}

}  // namespace

std::optional<lerp_form> lerp_form_for(dtype acc, dtype in) {
  if (is_float8(in)) in = dtype::float32;  // widened exactly, as float32 is: float32's form
  static std::mutex mutex;
  static std::array<std::array<int8_t, kNumDtypes>, kNumDtypes> known{};  // 0 not probed, -1 none, else a form
  std::lock_guard<std::mutex> lock(mutex);
  int8_t& k = known[static_cast<size_t>(acc)][static_cast<size_t>(in)];
  if (k == 0) {
    k = -1;
    if (is_native_accumulator(acc) && is_floating(in))
      for (lerp_form f : {lerp_form::one_minus_w, lerp_form::w_minus_one})
        if (probe_lerp(acc, in, f)) {
          k = static_cast<int8_t>(f);
          break;
        }
    spdlog::debug("lerp of {} into {}: {}", dtype_name(in), dtype_name(acc),
                  k == static_cast<int8_t>(lerp_form::one_minus_w)
                      ? "x - (x - avg) * (1 - w) as one FMA (swavg's kernel)"
                  : k == static_cast<int8_t>(lerp_form::w_minus_one) ? "fma(w - 1, x - avg, x) (swavg's kernel)"
                                                                     : "not reproduced, ATen computes it");
  }
  return k > 0 ? std::optional<lerp_form>(static_cast<lerp_form>(k)) : std::nullopt;
}

void check_device(const device_spec& device) { to_device(device); }

void aten_average(const fold_config& c, const tensor_plan& p, const chunk_writer& write) {
  const at::Device device = to_device(c.device);
  const auto acc_type = to_scalar_type(p.outcome.accumulate_type);
  const auto out_type = to_scalar_type(p.outcome.output_type);
  std::vector<at::Tensor> flats;
  for (const auto& s : p.sources) {
    flats.push_back(flat_tensor(*s.view));
    if (flats.back().data_ptr() != static_cast<const void*>(s.view->data())) release_pages(*s.view);  // a copy
  }
  at::Tensor resumed = p.resumed ? flat_tensor(*p.resumed) : at::Tensor();
  const int64_t numel = flats.empty() ? resumed.numel() : flats.front().numel();
  // SWA rounds each element alone, so it streams in slices; lerp runs on whole tensors, exactly as
  // PyTorch splits them (its vector lanes and scalar tail may round differently).
  const int64_t chunk = c.mode == fold_mode::swa ? kFoldChunkElements : std::max<int64_t>(numel, 1);
  const std::vector<double> weights = c.mode == fold_mode::swa ? std::vector<double>() : lerp_weights(c, p);
  at::Tensor diff;
  for (int64_t begin = 0; begin < numel || (numel == 0 && begin == 0); begin += chunk) {
    const int64_t length = std::min(chunk, numel - begin);
    int64_t k = 0;
    at::Tensor acc;
    if (p.resumed) {
      acc = chunk_of(resumed, begin, length, device).to(acc_type, /*non_blocking=*/false, /*copy=*/true);
      k = p.resumed_count;
    }
    for (size_t j = 0; j < flats.size(); ++j) {
      at::Tensor x = chunk_of(flats[j], begin, length, device);
      const tensor_view& view = *p.sources[j].view;
      if (k == 0) {
        acc = x.to(acc_type, /*non_blocking=*/false, /*copy=*/true);
      } else if (c.mode == fold_mode::swa && foreach_swa(device, acc)) {
        // AveragedModel on a device with foreach kernels (CUDA): get_swa_multi_avg_fn's
        // _foreach_lerp_ with the float32 weight 1 / (n_averaged + 1).
#if SWAVG_LIBTORCH_VERSION_MAJOR >= 2
        const at::Tensor end = x.scalar_type() == acc_type ? x : x.to(acc_type);
        at::_foreach_lerp_(at::TensorList(&acc, 1), at::TensorList(&end, 1), swa_lerp_weight(k));
#endif
      } else if (c.mode == fold_mode::swa) {
        if (!diff.defined() || diff.numel() != length || diff.scalar_type() != acc_type)
          diff = at::empty({length}, acc.options());
        at::sub_out(diff, x, acc);
        diff.div_(at::scalar_tensor(k + 1, at::TensorOptions().dtype(at::kLong).device(device)));
        acc.add_(diff);
      } else {
        acc.lerp_(x.scalar_type() == acc_type ? x : x.to(acc_type), weights[j]);
      }
      ++k;
      // Done with these input bytes: drop their pages so memory does not grow with the inputs.
      if (flats[j].data_ptr() == static_cast<const void*>(view.data())) {
        const uint64_t item = itemsize(view.type);
        release_pages(view, (static_cast<uint64_t>(view.offset) + begin) * item, static_cast<uint64_t>(length) * item);
      }
    }
    at::Tensor out = acc.scalar_type() == out_type ? acc : acc.to(out_type);
    out = out.device().is_cpu() ? out.contiguous() : out.to(at::kCPU).contiguous();
    write(out.data_ptr(), out.nbytes());
    if (numel == 0) break;
  }
}

}  // namespace swavg
