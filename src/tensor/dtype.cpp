#include "tensor/dtype.h"

namespace swavg {
namespace {

struct dtype_info {
  dtype type;
  size_t size;
  const char* name;
  const char* storage;  // nullptr: written through _rebuild_tensor_v3
  const char* safetensors;
};

constexpr dtype_info kInfo[kNumDtypes] = {
    {dtype::float32, 4, "float32", "FloatStorage", "F32"},
    {dtype::float64, 8, "float64", "DoubleStorage", "F64"},
    {dtype::float16, 2, "float16", "HalfStorage", "F16"},
    {dtype::bfloat16, 2, "bfloat16", "BFloat16Storage", "BF16"},
    {dtype::int64, 8, "int64", "LongStorage", "I64"},
    {dtype::int32, 4, "int32", "IntStorage", "I32"},
    {dtype::int16, 2, "int16", "ShortStorage", "I16"},
    {dtype::int8, 1, "int8", "CharStorage", "I8"},
    {dtype::uint8, 1, "uint8", "ByteStorage", "U8"},
    {dtype::bool_, 1, "bool", "BoolStorage", "BOOL"},
    {dtype::complex64, 8, "complex64", "ComplexFloatStorage", "C64"},
    {dtype::complex128, 16, "complex128", "ComplexDoubleStorage", nullptr},
    {dtype::uint16, 2, "uint16", nullptr, "U16"},
    {dtype::uint32, 4, "uint32", nullptr, "U32"},
    {dtype::uint64, 8, "uint64", nullptr, "U64"},
    {dtype::float8_e4m3fn, 1, "float8_e4m3fn", nullptr, "F8_E4M3"},
    {dtype::float8_e5m2, 1, "float8_e5m2", nullptr, "F8_E5M2"},
    {dtype::float8_e4m3fnuz, 1, "float8_e4m3fnuz", nullptr, "F8_E4M3FNUZ"},
    {dtype::float8_e5m2fnuz, 1, "float8_e5m2fnuz", nullptr, "F8_E5M2FNUZ"},
    {dtype::float8_e8m0fnu, 1, "float8_e8m0fnu", nullptr, "F8_E8M0"},
    {dtype::float4_e2m1fn_x2, 1, "float4_e2m1fn_x2", nullptr, "F4"},
    {dtype::complex32, 4, "complex32", nullptr, nullptr},
    {dtype::bits8, 1, "bits8", nullptr, nullptr},
    {dtype::bits16, 2, "bits16", nullptr, nullptr},
    {dtype::bits1x8, 1, "bits1x8", nullptr, nullptr},
    {dtype::bits2x4, 1, "bits2x4", nullptr, nullptr},
    {dtype::bits4x2, 1, "bits4x2", nullptr, nullptr},
};

const dtype_info& info(dtype t) { return kInfo[static_cast<int>(t)]; }

}  // namespace

size_t itemsize(dtype t) { return info(t).size; }
const char* dtype_name(dtype t) { return info(t).name; }
const char* storage_class_name(dtype t) { return info(t).storage; }
bool needs_rebuild_v3(dtype t) { return info(t).storage == nullptr; }
const char* safetensors_dtype_name(dtype t) { return info(t).safetensors; }

std::optional<dtype> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (name == i.name) return i.type;
  return std::nullopt;
}

std::optional<dtype> dtype_from_storage_class(std::string_view name) {
  for (const auto& i : kInfo)
    if (i.storage && name == i.storage) return i.type;
  return std::nullopt;
}

bool is_float8(dtype t) {
  return t == dtype::float8_e4m3fn || t == dtype::float8_e5m2 || t == dtype::float8_e4m3fnuz ||
         t == dtype::float8_e5m2fnuz || t == dtype::float8_e8m0fnu;
}

bool is_floating(dtype t) {
  return t == dtype::float32 || t == dtype::float64 || t == dtype::float16 || t == dtype::bfloat16 || is_float8(t);
}

bool is_complex(dtype t) { return t == dtype::complex64 || t == dtype::complex128; }

bool is_packed(dtype t) { return packed_reason(t) != nullptr; }

const char* packed_reason(dtype t) {
  switch (t) {
    case dtype::float4_e2m1fn_x2:
      return "two 4-bit floats packed in each byte, which PyTorch stores but cannot convert or compute with";
    case dtype::complex32: return "PyTorch's complex32 (ComplexHalf) has no lerp and is experimental";
    case dtype::bits8:
    case dtype::bits16:
    case dtype::bits1x8:
    case dtype::bits2x4:
    case dtype::bits4x2: return "raw bits with no numeric meaning to PyTorch";
    default: return nullptr;
  }
}

}  // namespace swavg
