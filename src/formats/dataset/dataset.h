/*
 * The samples `update-bn` replays, as one memory-mapped tensor of shape [N, ...] whose first
 * dimension indexes samples; batches are slices of it, read straight from the mapping.
 *
 * Formats, told by content (never by extension), except raw data, which --shape selects:
 *   .npy         "\x93NUMPY", version 1-3, a Python-literal header {'descr', 'fortran_order',
 *                'shape'}, then the array (C or Fortran order); little-endian numeric dtypes.
 *   torch.save   a tensor, or a list/tuple/dict holding it: the entry at --data-key (dotted path,
 *                list indices as numbers), else the first tensor entry. Read by the allow-list
 *                unpickler; nothing is executed.
 *   safetensors  the tensor named by --data-key, or the only one.
 *   raw          bytes of N samples of --shape, --dtype (default float32), row-major, little-endian.
 * Every size, stride and offset is checked against the file before a view is handed out. No
 * LibTorch here (the file is part of swavg_formats), so parse_npy_header can be fuzzed alone.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tensor/tensor_view.h"

namespace swavg {

struct dataset_options {
  std::string path;
  std::string key;             // torch.save / safetensors entry
  std::vector<int64_t> shape;  // raw: the shape of one sample
  std::optional<dtype> type;   // raw: element type (default float32)
};

struct dataset {
  std::string path;
  std::string format;   // "npy", "torch", "safetensors", "raw"
  std::string key;      // the entry taken from a torch.save or safetensors file, else empty
  tensor_view samples;  // [N, ...], a view into the mapped file

  int64_t size() const { return samples.shape.empty() ? 0 : samples.shape[0]; }
  std::vector<int64_t> sample_shape() const { return {samples.shape.begin() + 1, samples.shape.end()}; }
};

// Throws io_error (missing, unreadable), input_error (malformed, unsupported, no samples) or
// usage_error (a --data-key that names nothing or does not apply, --dtype without --shape).
dataset open_dataset(const dataset_options& options);

struct npy_header {
  dtype type = dtype::float32;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  uint64_t data_offset = 0;  // where the array's bytes start
};

// True when the bytes start with the .npy magic string.
bool looks_like_npy(const uint8_t* data, size_t size);

// Parses and validates the header of a .npy file held in `data` (the array bytes need not be
// there); `path` starts error messages. Throws input_error for anything malformed or unsupported.
npy_header parse_npy_header(const uint8_t* data, size_t size, const std::string& path);

}  // namespace swavg
