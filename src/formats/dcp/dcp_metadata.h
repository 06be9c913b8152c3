/*
 * The `.metadata` file of a PyTorch Distributed Checkpoint (torch.distributed.checkpoint, DCP)
 * folder, read as data: a pickled `Metadata` dataclass whose `state_dict_metadata` maps each
 * flattened name (FQN) to a TensorStorageMetadata (dtype, full size, the chunks saved) or a
 * BytesStorageMetadata (a non-tensor value), and whose `storage_data` maps a MetadataIndex
 * (FQN, chunk offsets) to the _StorageInfo saying where the chunk's bytes lie: a file of the
 * folder, an offset and a length.
 *
 * The pickle goes through the allow-list unpickler (nothing is called); then every global the
 * document reaches must be one of the classes and torch values DCP writes (torch 2.x layouts: the
 * dtype as a torch global, torch.Size, the layout through torch.serialization._get_layout or as a
 * global, _MEM_FORMAT_ENCODING through getattr or by value, pathlib paths in StorageMeta), else
 * input_error. The structure is then checked and turned into plain structs; chunk geometry against
 * the tensor (bounds, overlaps, holes) is checked here too, before any .distcp byte is read.
 */
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace swavg {

// Where a chunk's (or a non-tensor value's) bytes lie: a torch.save archive inside a .distcp file.
struct dcp_storage {
  std::string relative_path;  // a file name inside the checkpoint folder
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct dcp_chunk {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  dcp_storage storage;
};

// One key of planner_data's path: a str (a dict key) or an int (a list index, as DCP's flattening
// writes one); kept as it was so that an output unflattens to the same lists and dicts.
struct dcp_path_part {
  std::string text;      // the str, or the int in decimal
  bool integer = false;  // an int in the pickle: `value`
  int64_t value = 0;
  bool operator==(const dcp_path_part& o) const { return text == o.text && integer == o.integer; }
};

struct dcp_entry {
  std::string fqn;                  // "model.layers.0.attention.wq.weight"
  std::vector<dcp_path_part> path;  // planner_data's nesting: ("model", "layers", 0, ...); may be empty
  bool is_tensor = false;
  dtype type = dtype::float32;    // tensors only
  std::vector<int64_t> size;      // tensors only
  std::vector<dcp_chunk> chunks;  // tensors only, in the metadata's order
  dcp_storage storage;            // non-tensor values only
};

inline constexpr const char* kDcpSwavgField = "swavg_metadata";

struct dcp_metadata {
  std::vector<dcp_entry> entries;  // in state_dict_metadata's order
  std::string version;             // "1.0.0", or empty for checkpoints of torch before 2.4
  // swavg's own metadata (its resume record) in a DCP output swavg wrote: the `swavg_metadata`
  // attribute of the Metadata object, a dict of str, which torch's pickle.load sets and DCP ignores.
  std::map<std::string, std::string> swavg;
};

// Parses and validates `.metadata` bytes; `path` starts every message. Throws input_error naming
// the entry and the chunk for anything malformed or off the allow list.
dcp_metadata parse_dcp_metadata(const uint8_t* data, size_t size, const std::string& path);

// Reads and parses `folder`/.metadata (memory-mapped), as above.
dcp_metadata read_dcp_metadata(const std::string& folder);

// The most chunk corners check_chunk_tiling sorts for a tensor of `chunks` non-empty chunks:
// 16 per chunk (a chunk cut along 4 dimensions), at least kMinTilingCorners.
inline constexpr uint64_t kMinTilingCorners = uint64_t{1} << 20;
uint64_t tiling_corner_limit(size_t chunks);

// Checks that `chunks` tile a tensor of `size` exactly: every chunk inside, none overlapping, no
// element left out, in every dimension. Returns "" when they do, else what is wrong (naming the
// chunk by its offsets). O(C log C) for C = the sum over chunks of 2^(dimensions where the chunk
// ends before the tensor does): 2 per chunk for a split along one dimension, 4 for a 2-D grid;
// past `corner_limit` (tiling_corner_limit of the non-empty chunks by default) the chunks are refused.
std::string check_chunk_tiling(const std::vector<int64_t>& size, const std::vector<dcp_chunk>& chunks,
                               uint64_t corner_limit = 0);

}  // namespace swavg
