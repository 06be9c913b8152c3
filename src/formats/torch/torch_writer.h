/*
 * Writer for torch.save archives that PyTorch 1.13 and 2.x open with
 * torch.load(path, weights_only=True) as an OrderedDict of tensors, keys in the order added.
 *
 * Storages are streamed to the archive one after the other as data/<n> records (stored, 64-byte
 * aligned); data.pkl, version and byteorder follow; then the central directory. data.pkl is pickle
 * protocol 2 as torch.save writes it: collections.OrderedDict rebuilt through
 * torch._utils._rebuild_tensor_v2 with persistent ids ('storage', torch.<X>Storage, key, 'cpu',
 * numel), or, for the dtypes with no storage class (uint16, float8, float4, ...), as torch 2.x
 * writes them: _rebuild_tensor_v3 over ('storage', torch.storage.UntypedStorage, key, 'cpu',
 * nbytes) with the dtype (torch.<name>) as its last argument. Tensors may share a storage and carry any offset and
 * strides, so shared storages and views stay shared. Non-tensor entries (`object_entry`, read from an input's data.pkl)
 * follow the tensors in the same dict, emitted again as the pickle data they were read from.
 */
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <string>
#include <vector>

#include "tensor/state_dict.h"

namespace swavg {

class atomic_file;
class zip_writer;

class torch_writer {
 public:
  explicit torch_writer(atomic_file& out);
  ~torch_writer();

  // Streams one storage of `nbytes` bytes of `type`; returns its key. Call write() until all bytes
  // are given, then end_storage().
  std::string begin_storage(dtype type, uint64_t nbytes);
  void write(const void* data, uint64_t size);
  void end_storage();

  // Adds a tensor over a storage already written (or being written), of `type` (default: the
  // storage's).
  void add_tensor(const std::string& name, const std::string& storage_key, int64_t offset,
                  const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                  std::optional<dtype> type = std::nullopt);

  // Non-tensor entries to write after the tensors, as the pickle data they were read from. Throws
  // input_error naming an entry that cannot be written (one holding a tensor), before any byte.
  void add_objects(const std::vector<object_entry>& objects);

  // An extra record under the archive folder that loaders ignore (swavg's own metadata).
  void add_record(const std::string& name, const std::string& bytes);

  // Writes data.pkl, version, byteorder and the central directory. The caller then commits.
  void finish();

 private:
  struct storage_info {
    dtype type;
    uint64_t nbytes;
  };
  struct tensor_info {
    std::string name;
    std::string storage_key;
    dtype type;
    int64_t offset;
    std::vector<int64_t> shape;
    std::vector<int64_t> strides;
  };
  std::string pickle_state_dict() const;

  std::unique_ptr<zip_writer> zip_;
  std::unordered_map<std::string, storage_info> storages_;
  std::vector<tensor_info> tensors_;
  std::string objects_pickle_;
  size_t objects_ = 0;
  int next_key_ = 0;
};

// Writes `tensors` preserving storage sharing: each distinct source storage once, whole, and every
// tensor with its own offset and strides. The caller commits `out`.
void write_torch_state_dict(atomic_file& out, const std::vector<named_tensor>& tensors,
                            const std::vector<object_entry>& objects = {},
                            const std::map<std::string, std::string>& extra_records = {});

}  // namespace swavg
