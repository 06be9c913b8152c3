#include "libtorch/tensor_bridge.h"

#include <ATen/Context.h>
#include <ATen/Functions.h>
#include <fmt/format.h>

#include <cstring>

#include <torch/version.h>

#include "util/error.h"
#include "util/version.h"

namespace swavg {

// LibTorch 2.8 has every dtype torch 2.14 saves (uint16-64 came in 2.3, float8_e8m0fnu in 2.7,
// float4_e2m1fn_x2 in 2.8); an older one (Debian's 1.13) folds the dtypes it has.
#define SWAVG_ATEN_HAS_ALL_DTYPES (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8))

c10::ScalarType to_scalar_type(dtype t) {
  switch (t) {
    case dtype::float32: return c10::kFloat;
    case dtype::float64: return c10::kDouble;
    case dtype::float16: return c10::kHalf;
    case dtype::bfloat16: return c10::kBFloat16;
    case dtype::int64: return c10::kLong;
    case dtype::int32: return c10::kInt;
    case dtype::int16: return c10::kShort;
    case dtype::int8: return c10::kChar;
    case dtype::uint8: return c10::kByte;
    case dtype::bool_: return c10::kBool;
    case dtype::complex64: return c10::kComplexFloat;
    case dtype::complex128: return c10::kComplexDouble;
#if SWAVG_ATEN_HAS_ALL_DTYPES
    case dtype::uint16: return c10::ScalarType::UInt16;
    case dtype::uint32: return c10::ScalarType::UInt32;
    case dtype::uint64: return c10::ScalarType::UInt64;
    case dtype::float8_e4m3fn: return c10::ScalarType::Float8_e4m3fn;
    case dtype::float8_e5m2: return c10::ScalarType::Float8_e5m2;
    case dtype::float8_e4m3fnuz: return c10::ScalarType::Float8_e4m3fnuz;
    case dtype::float8_e5m2fnuz: return c10::ScalarType::Float8_e5m2fnuz;
    case dtype::float8_e8m0fnu: return c10::ScalarType::Float8_e8m0fnu;
    case dtype::float4_e2m1fn_x2: return c10::ScalarType::Float4_e2m1fn_x2;
    case dtype::complex32: return c10::ScalarType::ComplexHalf;
    case dtype::bits8: return c10::ScalarType::Bits8;
    case dtype::bits16: return c10::ScalarType::Bits16;
    case dtype::bits1x8: return c10::ScalarType::Bits1x8;
    case dtype::bits2x4: return c10::ScalarType::Bits2x4;
    case dtype::bits4x2: return c10::ScalarType::Bits4x2;
#endif
    default: break;
  }
  throw usage_error(
      fmt::format("{} tensors need LibTorch 2.8 or later here; swavg-torch was built with LibTorch {} "
                  "(fold on the CPU without --avg-fn or --update-bn, or rebuild against a newer LibTorch)",
                  dtype_name(t), SWAVG_LIBTORCH_VERSION));
}

dtype from_scalar_type(c10::ScalarType t, const std::string& what) {
  for (int i = 0; i < kNumDtypes; ++i) {
    auto d = static_cast<dtype>(i);
#if !SWAVG_ATEN_HAS_ALL_DTYPES
    if (d >= dtype::uint16) continue;  // no such ScalarType in this LibTorch
#endif
    if (to_scalar_type(d) == t) return d;
  }
  throw input_error(what + ": element type " + std::string(c10::toString(t)) + " is not supported by swavg");
}

at::Tensor to_tensor(const tensor_view& v) {
  const auto options = at::TensorOptions().dtype(to_scalar_type(v.type)).device(at::kCPU);
  const uint8_t* first = v.data();
  if (v.numel() == 0) return at::empty(v.shape, options);
  if (v.pieces) {
    auto whole = at::empty(v.shape, options);
    gather_contiguous(v, whole.data_ptr());
    return whole;
  }
  if (reinterpret_cast<uintptr_t>(first) % itemsize(v.type) != 0) {
    auto copy = at::empty({static_cast<int64_t>(v.storage_bytes / itemsize(v.type))}, options);
    std::memcpy(copy.data_ptr(), v.storage, v.storage_bytes);
    return copy.as_strided(v.shape, v.strides, v.offset);
  }
  auto owner = v.owner;
  return at::from_blob(
      const_cast<uint8_t*>(first), v.shape, v.strides, [owner](void*) {}, options);
}

at::Device to_device(const device_spec& d, const std::string& option) {
  if (d.is_cpu()) return at::Device(at::kCPU);
  if (!at::hasCUDA())
    throw usage_error(
        fmt::format("{} {}: this swavg was built without CUDA or no GPU is visible", option, device_name(d)));
  return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(d.index));
}

tensor_view from_tensor(const at::Tensor& t, std::shared_ptr<const void> owner) {
  tensor_view v;
  v.type = from_scalar_type(t.scalar_type(), "tensor");
  v.shape = t.sizes().vec();
  v.strides = t.strides().vec();
  v.offset = t.storage_offset();
  const auto& storage = t.storage();
  v.storage = static_cast<const uint8_t*>(storage.data());
  v.storage_bytes = storage.nbytes();
  v.storage_key = std::to_string(reinterpret_cast<uintptr_t>(storage.data()));
  v.owner = owner ? std::move(owner) : std::make_shared<at::Tensor>(t);
  return v;
}

}  // namespace swavg
