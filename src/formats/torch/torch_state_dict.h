/*
 * What the two torch.save formats share (formats/torch/torch_file.h, the ZIP archive, and
 * formats/torch/legacy_torch_file.h): the state dict chosen in the unpickled object, and its tensors
 * viewed through a table of storages checked once each.
 *
 * Before any view is handed out, each storage must hold exactly numel x itemsize bytes, and every
 * tensor's offset, sizes and strides must stay inside its storage. Tensors that share a storage
 * (tied weights, views) share the mapped bytes.
 *
 * The state dict is found in the unpickled object: the dict at --key, else the top level when it
 * maps names to tensors, else the first of kStateDictKeys present. Its tensors become views; its
 * other entries are kept as pickle data (`state_dict::objects`, with the document alive) for
 * writers to carry. Tensors that are not dense (sparse, quantized, nested, meta, wrapper
 * subclasses) and tensors under non-string keys are refused by name.
 */
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/state_dict.h"

namespace swavg {

class mapped_file;
class pickle_document;
struct pickle_node;
struct pickle_tensor_ref;

// Keys tried in order when the top level is not itself a state dict.
extern const std::vector<std::string> kStateDictKeys;

// One storage's bytes inside the mapped file, wherever its container keeps them.
struct storage_record {
  std::string name;  // for messages: "storage record 'archive/data/0'"
  const uint8_t* data = nullptr;
  uint64_t size = 0;
};

// Turns tensor references of one file into views, checking each storage once (numel x itemsize
// bytes, one dtype, one element count) and every view's bounds. The storages come from an archive's
// data/ records or, for the legacy format, from a table built by its reader.
class torch_storage_reader {
 public:
  // Finds the storage of a key; throws input_error when there is none.
  using lookup = std::function<storage_record(const std::string& key)>;
  torch_storage_reader(std::shared_ptr<const mapped_file> file, lookup find);
  // `what` names the tensor in messages ("tensor 'fc.weight'").
  tensor_view view_of(const std::string& what, const pickle_tensor_ref& t);

 private:
  std::shared_ptr<const mapped_file> file_;
  lookup find_;
  std::unordered_map<std::string, std::pair<dtype, storage_record>> checked_;  // storage key -> dtype, bytes
};

// The value at a dotted path of dict keys and list/tuple indices; a dict key that itself contains
// dots is matched whole first. Throws usage_error naming `option` and `file`, listing the entries
// where the walk stopped.
const pickle_node* resolve_pickle_path(const pickle_node* root, const std::string& dotted, const std::string& file,
                                       const std::string& option);
// How a dict key or list index reads in a path: the string, the integer, else "<type>".
std::string pickle_key_text(const pickle_node* key);

// The state dict in an unpickled torch.save object, chosen as described above (`key` a dotted path,
// empty for automatic), its tensors viewed through `reader`; `doc` is kept when entries other than
// tensors are.
state_dict take_state_dict(const std::string& path, std::unique_ptr<pickle_document> doc, torch_storage_reader& reader,
                           const std::string& key);

}  // namespace swavg
