/*
 * An allow-list unpickler for the data.pkl record of torch.save archives (pickle protocols 0-5 as
 * far as torch.save and TorchScript emit them).
 *
 * It never imports or calls anything. GLOBAL/STACK_GLOBAL push a reference to a name; REDUCE,
 * NEWOBJ and BUILD on a reference interpret only a fixed list of callables:
 *   collections.OrderedDict, collections.defaultdict, builtins.dict/list/tuple/set -> containers
 *   builtins.bytes/bytearray, _codecs.encode(text, "latin1") -> bytes (protocols 0-2 write bytes so)
 *   torch._utils._rebuild_tensor_v2, _rebuild_tensor, _rebuild_parameter,
 *   _rebuild_parameter_with_state                     -> tensor
 *   torch._utils._rebuild_tensor_v3(storage, offset, size, stride, requires_grad, hooks, dtype
 *   [, metadata]), as torch.save writes the dtypes with no typed storage (uint16, float8, ...)
 *   over an UntypedStorage; dtype a torch.<name> global -> tensor of that dtype
 *   torch._tensor._rebuild_from_type_v2(rebuild, new_type, args, state), as torch.save writes a
 *   tensor subclass, with one of the rebuilds above    -> tensor (new_type's name kept as `subclass`)
 *   torch.<X>Storage as a persistent-id argument       -> storage
 * Any other callable (argparse.Namespace, a numpy scalar, os.system, ...) yields an opaque node that
 * records the callable's name, its arguments and what BUILD/SETITEM/APPEND gave it (`pickle_call`,
 * `items`, `entries`), as data: nothing is called.
 *
 * All nodes live in an arena owned by `pickle_document`, referred to by raw pointers, so memo
 * sharing, cycles and deep nesting cost no recursion when the document is destroyed. Consumers walk
 * it with explicit depth limits. None, True, False, the ints 0-255 and the empty tuple are shared
 * nodes (immutable, as in Python).
 *
 * Resources are proportional to the record: everything the parser allocates (nodes, their text,
 * container slots, call arguments, tensor shapes, the memo and its key indexes) is counted against
 * a budget of `bytes_per_input_byte` times the record's size plus `base_bytes`, at most
 * `max_bytes`, so that a small record cannot build huge containers out of memoised objects
 * (list(x), dict(x), bytes(x) or a call repeated on one big memo entry). Work per opcode is
 * constant or proportional to what it allocates; dict and set keys are compared through interned
 * ids, so a big key is hashed once. Passing a limit is an input_error naming it.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tensor/dtype.h"

namespace swavg {

struct pickle_node;

struct pickle_storage_ref {
  std::string key;              // record name under data/ ("0", "1", ...)
  dtype type = dtype::float32;  // uint8 for an UntypedStorage
  bool untyped = false;         // torch.UntypedStorage: numel counts bytes
  std::string location;         // "cpu", "cuda:0", ...
  uint64_t numel = 0;           // elements of `type` as declared in the persistent id
};

// The storage's class as the file names it: "FloatStorage", "UntypedStorage", ...
inline const char* storage_class_of(const pickle_storage_ref& s) {
  return s.untyped ? "UntypedStorage" : storage_class_name(s.type);
}

struct pickle_tensor_ref {
  pickle_storage_ref storage;
  dtype type = dtype::float32;  // the storage's (_rebuild_tensor_v2) or the one named (_rebuild_tensor_v3)
  int64_t offset = 0;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  bool requires_grad = false;
  bool is_parameter = false;  // rebuilt through _rebuild_parameter*
  std::string subclass;       // _rebuild_from_type_v2's new_type ("module.name"); empty for torch.Tensor
};

enum class pickle_kind : uint8_t {
  none,
  boolean,
  integer,      // fits int64: int_value
  big_integer,  // does not fit int64: text holds the little-endian two's complement bytes
  floating,
  string,  // text (UTF-8)
  bytes,   // text (raw bytes)
  list,
  tuple,
  set,
  dict,     // items in insertion order
  global,   // a reference to module.name (text), not yet called
  storage,  // a persistent id that named a storage
  tensor,
  opaque,  // the result of calling or building something not allowed (text: module.name)
};

// How an opaque node came to be, kept so that a writer can emit the same pickle data again and a
// reader can look at an object's state (TorchScript modules are __torch__.* objects whose state
// is a dict) without running anything.
struct pickle_call {
  pickle_node* callee = nullptr;  // the global (or opaque) node that was called
  std::vector<pickle_node*> args;
  pickle_node* kwargs = nullptr;  // NEWOBJ_EX only
  bool constructed = false;       // cls.__new__(cls, *args) (NEWOBJ, NEWOBJ_EX, OBJ), else callee(*args)
  pickle_node* state = nullptr;   // the last BUILD state, if any
};

struct pickle_node {
  pickle_kind kind = pickle_kind::none;
  bool bool_value = false;
  int64_t int_value = 0;
  double float_value = 0.0;
  std::string text;
  std::vector<pickle_node*> items;                             // list, tuple, set; opaque: APPENDed
  std::vector<std::pair<pickle_node*, pickle_node*>> entries;  // dict; opaque: SETITEMed, in order
  bool ordered = false;                                        // dict built as collections.OrderedDict
  pickle_node* attributes = nullptr;  // dict state set by BUILD on a dict (OrderedDict._metadata)
  std::unique_ptr<pickle_storage_ref> storage;
  std::unique_ptr<pickle_tensor_ref> tensor;
  std::unique_ptr<pickle_call> call;  // opaque
};

class pickle_document {
 public:
  pickle_node* root() const { return root_; }
  // Every name that became an opaque node, as "module.name", in order of first appearance.
  const std::vector<std::string>& opaque_globals() const { return opaque_globals_; }
  // Every name a GLOBAL, STACK_GLOBAL or INST opcode named, as "module.name", in order of first
  // appearance: whether or not the document's root reaches it (a call whose result was popped).
  const std::vector<std::string>& named_globals() const { return named_globals_; }
  // Every node the parser made, reachable from the root or not.
  const std::vector<std::unique_ptr<pickle_node>>& nodes() const { return nodes_; }
  // Bytes the parser counted against unpickle_limits' memory budget.
  uint64_t charged_bytes() const { return charged_bytes_; }
  // Bytes read up to and including STOP: where the next pickle starts in a stream of several
  // (the legacy torch.save format, formats/torch/legacy_torch_file.h).
  size_t consumed() const { return consumed_; }
  // The storage of every persistent id loaded, in the order loaded (one referenced twice is listed twice).
  const std::vector<const pickle_storage_ref*>& storages() const { return storages_; }

  // Used by the parser.
  pickle_node* make(pickle_kind kind);
  void set_root(pickle_node* n) { root_ = n; }
  void note_opaque(const std::string& name);
  void note_global(const std::string& name);
  void set_charged_bytes(uint64_t n) { charged_bytes_ = n; }
  void set_consumed(size_t n) { consumed_ = n; }
  void note_storage(const pickle_storage_ref* s) { storages_.push_back(s); }

 private:
  std::vector<std::unique_ptr<pickle_node>> nodes_;
  pickle_node* root_ = nullptr;
  std::vector<std::string> opaque_globals_;
  std::unordered_set<std::string> opaque_seen_;
  std::vector<std::string> named_globals_;
  std::unordered_set<std::string> named_seen_;
  uint64_t charged_bytes_ = 0;
  size_t consumed_ = 0;
  std::vector<const pickle_storage_ref*> storages_;
};

struct unpickle_limits {
  size_t max_nodes = 50'000'000;
  size_t max_memo = 50'000'000;
  size_t max_stack = 10'000'000;
  size_t max_name = 4096;  // bytes in a global's module or name
  // The memory budget: bytes_per_input_byte * size + base_bytes, at most max_bytes.
  uint64_t bytes_per_input_byte = 64;
  uint64_t base_bytes = uint64_t{64} << 20;
  uint64_t max_bytes = uint64_t{8} << 30;
};

// "str", "int", "dict", "OrderedDict", "argparse.Namespace", "tensor", ... for messages and inspect.
std::string pickle_type_name(const pickle_node& n);

}  // namespace swavg
