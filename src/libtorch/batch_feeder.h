/*
 * update-bn's batches, shared by the TorchScript replay (bn_replay.cpp) and the torch.export one
 * (export_replay.cpp): each batch as a tensor of the type the model takes on its device, narrowed
 * from the mapped data without a copy where it can be.
 */
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

#include "formats/dataset/dataset.h"

namespace swavg {

// Batches are narrowed from one tensor over the whole mapped array. Bytes not aligned to the
// element size (possible in files not written by numpy or PyTorch) are copied batch by batch.
class batch_source {
 public:
  explicit batch_source(const tensor_view& v);
  at::Tensor get(int64_t begin, int64_t count) const;

 private:
  const tensor_view& view_;
  at::TensorOptions options_;
  bool aligned_ = false;
  at::Tensor all_;
};

// Hands out batches as the model takes them: on the CPU in the data's own dtype straight from the
// mapped data, else converted into one staging tensor on the device.
class batch_feeder {
 public:
  batch_feeder(const dataset& data, dtype input_type, const at::Device& device, int64_t batch_size);
  at::Tensor get(int64_t begin, int64_t count);

 private:
  batch_source source_;
  bool direct_ = false;
  at::Tensor staging_;
};

}  // namespace swavg
