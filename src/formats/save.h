/*
 * Writes a state dict as torch.save or safetensors, atomically. The format comes from --format or,
 * failing that, the output's extension (.safetensors; anything else is torch.save).
 */
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tensor/state_dict.h"

namespace swavg {

enum class output_format { torch, safetensors };

const char* output_format_name(output_format f);  // "torch", "safetensors"

// `requested` (--format) or else by the path's extension.
output_format choose_output_format(const std::string& path, std::optional<output_format> requested);

// Tensors may be strided views; safetensors gets them contiguous, torch.save keeps storages shared.
// `metadata` goes to safetensors' __metadata__ or to a swavg.json record in the torch archive,
// where loaders ignore it. Returns the number of bytes written.
uint64_t save_state_dict(const std::string& path, const std::vector<named_tensor>& tensors, output_format format,
                         const std::map<std::string, std::string>& metadata = {});

struct tensor_spec {
  std::string name;
  dtype type;
  std::vector<int64_t> shape;
};

// Streams tensors to a torch.save or safetensors file in the order declared up front: write() the
// bytes of each tensor (contiguous, row-major) one after the other, then commit(). Nothing appears
// at `path` before commit(); a sink destroyed before it leaves no trace.
class tensor_sink {
 public:
  tensor_sink(const std::string& path, output_format format, std::vector<tensor_spec> specs,
              const std::map<std::string, std::string>& metadata);
  ~tensor_sink();
  void write(const void* data, uint64_t size);
  void commit();
  uint64_t bytes_written() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace swavg
