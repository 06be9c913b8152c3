/*
 * safetensors (https://github.com/huggingface/safetensors): an 8-byte little-endian header length
 * N, N bytes of UTF-8 JSON {"name": {"dtype", "shape", "data_offsets": [begin, end]}, ...,
 * "__metadata__": {str: str}}, then the tensor bytes, row-major, little-endian.
 *
 * The reader validates as the reference implementation does: header length sane and inside the
 * file, valid UTF-8 JSON object, known dtypes, shape x itemsize equal to the byte range, ranges that
 * tile the data section exactly (no gap, overlap or trailing byte), no duplicate names. Tensors are
 * zero-copy views into the mapping, in order of their data offsets.
 *
 * The writer emits the header first (padded with spaces to a multiple of 8 bytes, as the reference
 * does), then streams each tensor's bytes in the order given.
 */
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/core/output_sink.h"
#include "tensor/state_dict.h"

namespace swavg {

class atomic_file;
class mapped_file;

constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;  // the reference implementation's limit

// True when the first 8 bytes are a plausible header length followed by '{'.
// Whether the path ends in ".safetensors".
bool has_safetensors_extension(const std::string& path);
bool looks_like_safetensors(const uint8_t* data, size_t size);

struct safetensors_content {
  std::vector<named_tensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Throws input_error naming the file, the tensor and expected vs found.
safetensors_content read_safetensors(const std::shared_ptr<const mapped_file>& file);

class safetensors_writer {
 public:
  // Writes the header (aliases are not a safetensors notion: alias_of is not read). Throws
  // usage_error for a dtype safetensors cannot hold (complex) or a duplicate or empty name.
  safetensors_writer(atomic_file& out, const std::vector<tensor_spec>& specs,
                     const std::map<std::string, std::string>& metadata);
  // Appends the next tensor's bytes (contiguous, row-major); may be called several times per
  // tensor. finish() checks that exactly the declared bytes were written.
  void write(const void* data, uint64_t size);
  void finish();

 private:
  atomic_file& out_;
  uint64_t expected_ = 0;
  uint64_t written_ = 0;
};

// The size of the file safetensors_writer writes for `specs` and `metadata` (the header built the
// same way, by the same code), for plans (--dry-run); throws what the writer would, naming `path`.
uint64_t safetensors_file_size(const std::string& path, const std::vector<tensor_spec>& specs,
                               const std::map<std::string, std::string>& metadata);

}  // namespace swavg
