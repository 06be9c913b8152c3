// update-bn's batches (see batch_feeder.h).
#include "libtorch/batch_feeder.h"

#include <ATen/Functions.h>

#include <algorithm>
#include <cstring>

#include "libtorch/tensor_bridge.h"

namespace swavg {

batch_source::batch_source(const tensor_view& v) : view_(v) {
  options_ = at::TensorOptions().dtype(to_scalar_type(v.type)).device(at::kCPU);
  aligned_ = reinterpret_cast<uintptr_t>(v.data()) % itemsize(v.type) == 0;
  if (aligned_) {
    auto owner = v.owner;
    all_ = at::from_blob(
        const_cast<uint8_t*>(v.data()), v.shape, v.strides, [owner](void*) {}, options_);
  }
}

at::Tensor batch_source::get(int64_t begin, int64_t count) const {
  if (aligned_) return all_.narrow(0, begin, count);
  std::vector<int64_t> shape = view_.shape;
  shape[0] = count;
  int64_t span = 1;
  for (size_t i = 0; i < shape.size(); ++i) span += (shape[i] - 1) * view_.strides[i];
  auto copy = at::empty({span}, options_);
  const size_t item = itemsize(view_.type);
  std::memcpy(copy.data_ptr(), view_.data() + static_cast<uint64_t>(begin * view_.strides[0]) * item,
              static_cast<size_t>(span) * item);
  return copy.as_strided(shape, view_.strides, 0);
}

batch_feeder::batch_feeder(const dataset& data, dtype input_type, const at::Device& device, int64_t batch_size)
    : source_(data.samples) {
  direct_ = device.is_cpu() && input_type == data.samples.type;
  if (direct_) return;
  std::vector<int64_t> shape = data.samples.shape;
  shape[0] = std::min(batch_size, data.size());
  staging_ = at::empty(shape, at::TensorOptions().dtype(to_scalar_type(input_type)).device(device));
}

at::Tensor batch_feeder::get(int64_t begin, int64_t count) {
  at::Tensor x = source_.get(begin, count);
  return direct_ ? x : staging_.narrow(0, 0, count).copy_(x);
}

}  // namespace swavg
