#include "tensor/dtype.h"

namespace swavg {
namespace {

struct dtype_info {
  dtype type;
  size_t size;
  const char* name;
  const char* storage;
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
    {dtype::complex64, 8, "complex64", "ComplexFloatStorage", nullptr},
    {dtype::complex128, 16, "complex128", "ComplexDoubleStorage", nullptr},
};

const dtype_info& info(dtype t) { return kInfo[static_cast<int>(t)]; }

}  // namespace

size_t itemsize(dtype t) { return info(t).size; }
const char* dtype_name(dtype t) { return info(t).name; }
const char* storage_class_name(dtype t) { return info(t).storage; }
const char* safetensors_dtype_name(dtype t) { return info(t).safetensors; }

std::optional<dtype> dtype_from_name(std::string_view name) {
  for (const auto& i : kInfo)
    if (name == i.name) return i.type;
  return std::nullopt;
}

std::optional<dtype> dtype_from_storage_class(std::string_view name) {
  for (const auto& i : kInfo)
    if (name == i.storage) return i.type;
  return std::nullopt;
}

bool is_floating(dtype t) {
  return t == dtype::float32 || t == dtype::float64 || t == dtype::float16 || t == dtype::bfloat16;
}

bool is_complex(dtype t) { return t == dtype::complex64 || t == dtype::complex128; }

}  // namespace swavg
