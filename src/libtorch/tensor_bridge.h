/*
 * The one place where swavg's vocabulary (tensor_view, dtype, device_spec) meets LibTorch's. A view becomes an
 * at::Tensor over the same bytes (no copy; the tensor keeps the view's owner alive); an at::Tensor becomes a view that
 * keeps the tensor alive.
 */
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <string>

#include "tensor/device.h"
#include "tensor/tensor_view.h"

namespace swavg {

c10::ScalarType to_scalar_type(dtype t);
// Throws input_error for element types swavg does not handle (quantized, float8, ...).
dtype from_scalar_type(c10::ScalarType t, const std::string& what);

// A CPU tensor over the view's bytes. Bytes not aligned to the element size (possible in archives
// not written by PyTorch) are copied to aligned memory first.
at::Tensor to_tensor(const tensor_view& v);

// A view of a CPU tensor's storage, keyed by the storage's address so that views of one storage
// share a key. The view keeps `owner` alive, or the tensor itself when no owner is given.
tensor_view from_tensor(const at::Tensor& t, std::shared_ptr<const void> owner = nullptr);

// The LibTorch device; throws usage_error, naming `option`, when it cannot be used here (this
// LibTorch has no CUDA, or no GPU is visible).
at::Device to_device(const device_spec& d, const std::string& option = "--device");

}  // namespace swavg
