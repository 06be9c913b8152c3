/*
 * Element types swavg reads and writes, independent of LibTorch so that the file parsers build and
 * can be fuzzed without it. Names follow PyTorch (`float32`, `bfloat16`, `int64`, ...).
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace swavg {

enum class dtype : uint8_t {
  float32,
  float64,
  float16,
  bfloat16,
  int64,
  int32,
  int16,
  int8,
  uint8,
  bool_,
  complex64,
  complex128,
};

constexpr int kNumDtypes = 12;

size_t itemsize(dtype t);
// PyTorch's name: "float32", "bfloat16", "int64", "bool", "complex64", ...
const char* dtype_name(dtype t);
std::optional<dtype> dtype_from_name(std::string_view name);
bool is_floating(dtype t);  // float16, bfloat16, float32, float64
bool is_complex(dtype t);

// torch.save's legacy storage classes: "FloatStorage", "BFloat16Storage", ...
const char* storage_class_name(dtype t);
std::optional<dtype> dtype_from_storage_class(std::string_view name);

// safetensors' names: "F32", "BF16", "I64", "BOOL", ...; complex types have none (nullptr).
const char* safetensors_dtype_name(dtype t);

}  // namespace swavg
