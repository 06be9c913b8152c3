/*
 * Element types swavg reads and writes, independent of LibTorch so that the file parsers build and
 * can be fuzzed without it. Names follow PyTorch (`float32`, `bfloat16`, `int64`, ...).
 *
 * Every dtype torch 2.14's torch.save writes is here. They fall in four kinds:
 *  - floating: float16/32/64, bfloat16 and the float8 family (e4m3fn, e5m2, e4m3fnuz, e5m2fnuz,
 *    e8m0fnu). Averaged; the 8-bit ones only in a float32 or float64 accumulator (PyTorch has no
 *    arithmetic in them) and rounded once with c10's conversion.
 *  - complex: complex64 and complex128.
 *  - integer: int8-int64 and uint8-uint64, and bool: never averaged unless asked (int_average.h).
 *  - packed: float4_e2m1fn_x2 (two 4-bit floats per byte), complex32 and the bits* types, which
 *    PyTorch can store but not convert or compute with: read, copied and written back, never
 *    averaged.
 * torch.save writes the dtypes PyTorch 2.1 and later added (uint16-64, float8, float4, complex32,
 * bits*) with torch._utils._rebuild_tensor_v3 over an UntypedStorage: they have no typed storage
 * class.
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
  uint16,
  uint32,
  uint64,
  float8_e4m3fn,
  float8_e5m2,
  float8_e4m3fnuz,
  float8_e5m2fnuz,
  float8_e8m0fnu,
  float4_e2m1fn_x2,
  complex32,
  bits8,
  bits16,
  bits1x8,
  bits2x4,
  bits4x2,
};

constexpr int kNumDtypes = 27;

size_t itemsize(dtype t);
// PyTorch's name: "float32", "bfloat16", "int64", "bool", "complex64", "float8_e4m3fn", ...
const char* dtype_name(dtype t);
std::optional<dtype> dtype_from_name(std::string_view name);
bool is_floating(dtype t);  // float16, bfloat16, float32, float64 and the float8 types
bool is_float8(dtype t);    // float8_e4m3fn, float8_e5m2, float8_e4m3fnuz, float8_e5m2fnuz, float8_e8m0fnu
bool is_complex(dtype t);   // complex64, complex128 (complex32 is packed)
// float4_e2m1fn_x2, complex32 and the bits* types: no arithmetic and no conversion in PyTorch.
bool is_packed(dtype t);
// Why a packed dtype cannot be averaged, for messages ("two 4-bit floats packed in each byte, ...").
const char* packed_reason(dtype t);

// torch.save's legacy storage classes: "FloatStorage", "BFloat16Storage", ...; nullptr for the
// dtypes torch.save writes through _rebuild_tensor_v3 over an UntypedStorage (needs_rebuild_v3).
const char* storage_class_name(dtype t);
std::optional<dtype> dtype_from_storage_class(std::string_view name);
bool needs_rebuild_v3(dtype t);

// safetensors' names: "F32", "BF16", "I64", "BOOL", "F8_E4M3", "F4", ...; nullptr where
// safetensors has none (complex128, complex32, bits*).
const char* safetensors_dtype_name(dtype t);

}  // namespace swavg
