#include "formats/torch/torch_writer.h"

#include <fmt/format.h>

#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "formats/pickle/pickle.h"
#include "formats/pickle/pickle_deny_list.h"
#include "formats/pickle/pickle_emitter.h"
#include "formats/pickle/pickle_opcodes.h"
#include "formats/zip/zip_writer.h"
#include "tensor/state_dict.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace swavg {
namespace {

using namespace pickle_op;

constexpr const char* kArchiveRoot = "archive/";
constexpr const char* kFormatVersion = "3\n";
constexpr int kMaxObjectDepth = 1000;

// Emits non-tensor entries again as the pickle data they were read from: containers and scalars as
// themselves, opaque objects as the GLOBAL, REDUCE/NEWOBJ, BUILD, APPENDS and SETITEMS they were
// built with. Nothing is interpreted. Shared and cyclic structures go through the memo as Python's
// pickler writes them; a tensor or storage inside an entry is refused (its bytes would need records
// of their own).
class object_emitter {
 public:
  explicit object_emitter(pickle_emitter& out) : out_(out) {}

  void entry(const object_entry& e) {
    entry_ = &e;
    if (e.renamed)
      out_.string(e.name);
    else
      node(e.key, 0);
    node(e.value, 0);
  }

 private:
  [[noreturn]] void refuse(const std::string& why) const {
    throw input_error(fmt::format("{}: non-tensor entry '{}' ({}) cannot be written to a torch.save file: {}",
                                  entry_->file.empty() ? "<unknown file>" : entry_->file, entry_->name, entry_->type,
                                  why));
  }

  bool memoized(const pickle_node* n) {
    auto it = memo_.find(n);
    if (it == memo_.end()) return false;
    out_.get(it->second);
    return true;
  }
  void memoize(const pickle_node* n) {
    const auto i = static_cast<uint32_t>(memo_.size());
    memo_.emplace(n, i);
    out_.put(i);
  }

  void global(const std::string& dotted) {
    const size_t dot = dotted.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == dotted.size()) refuse("bad global name " + dotted);
    if (runs_code_when_loaded(dotted))
      refuse(
          fmt::format("it refers to {}, which runs code or touches files when the file is loaded; "
                      "--drop-objects leaves such entries out",
                      dotted));
    out_.global(dotted.substr(0, dot), dotted.substr(dot + 1));
  }

  void items(const std::vector<pickle_node*>& xs, int depth) {
    if (xs.empty()) return;
    out_.mark();
    for (const pickle_node* x : xs) node(x, depth + 1);
    out_.plain(kAppends);
  }
  void entries(const std::vector<std::pair<pickle_node*, pickle_node*>>& kv, int depth) {
    if (kv.empty()) return;
    out_.mark();
    for (const auto& [k, v] : kv) {
      node(k, depth + 1);
      node(v, depth + 1);
    }
    out_.plain(kSetItems);
  }

  void node(const pickle_node* n, int depth) {
    if (depth > kMaxObjectDepth) refuse(fmt::format("it nests deeper than {} levels", kMaxObjectDepth));
    if (!n) return out_.none();
    switch (n->kind) {
      case pickle_kind::none: return out_.none();
      case pickle_kind::boolean: return out_.boolean(n->bool_value);
      case pickle_kind::integer: return out_.integer(n->int_value);
      case pickle_kind::big_integer: return out_.long_bytes(n->text);
      case pickle_kind::floating: return out_.floating(n->float_value);
      case pickle_kind::string: return out_.string(n->text);
      case pickle_kind::bytes: return out_.byte_string(n->text);
      case pickle_kind::global: return global(n->text);
      case pickle_kind::tensor:
      case pickle_kind::storage: refuse("it holds a tensor");
      case pickle_kind::list:
        if (memoized(n)) return;
        out_.plain(kEmptyList);
        memoize(n);
        return items(n->items, depth);
      case pickle_kind::dict:
        if (memoized(n)) return;
        if (n->ordered)
          out_.empty_ordered_dict();
        else
          out_.plain(kEmptyDict);
        memoize(n);
        entries(n->entries, depth);
        if (n->ordered && n->attributes) {
          node(n->attributes, depth + 1);
          out_.plain(kBuild);
        }
        return;
      case pickle_kind::set:
        if (memoized(n)) return;
        out_.global("builtins", "set");
        out_.plain(kEmptyList);
        items(n->items, depth);
        out_.plain(kTuple1);
        out_.reduce();
        return memoize(n);
      case pickle_kind::tuple:
        if (memoized(n)) return;
        out_.mark();
        for (const pickle_node* x : n->items) node(x, depth + 1);
        // An item that refers back to this tuple (through a list or dict) wrote it already, as
        // Python's pickler does: drop the items and take that one.
        if (auto it = memo_.find(n); it != memo_.end()) {
          out_.plain(kPopMark);
          return out_.get(it->second);
        }
        out_.tuple_from_mark();
        return memoize(n);
      case pickle_kind::opaque: return object(n, depth);
    }
  }

  void object(const pickle_node* n, int depth) {
    if (memoized(n)) return;
    if (!n->call) refuse(fmt::format("the {} object has no recorded construction", n->text));
    if (!building_.insert(n).second)
      refuse(fmt::format("the {} object is among its own construction arguments", n->text));
    const pickle_call& c = *n->call;
    node(c.callee, depth + 1);
    out_.mark();
    for (const pickle_node* a : c.args) node(a, depth + 1);
    out_.tuple_from_mark();
    if (c.kwargs) {
      node(c.kwargs, depth + 1);
      out_.plain(kNewObjEx);
    } else {
      out_.plain(c.constructed ? kNewObj : kReduce);
    }
    building_.erase(n);
    memoize(n);
    items(n->items, depth);
    entries(n->entries, depth);
    if (c.state) {
      node(c.state, depth + 1);
      out_.plain(kBuild);
    }
  }

  pickle_emitter& out_;
  const object_entry* entry_ = nullptr;
  std::unordered_map<const pickle_node*, uint32_t> memo_;
  std::unordered_set<const pickle_node*> building_;
};

}  // namespace

torch_writer::torch_writer(atomic_file& out) : zip_(std::make_unique<zip_writer>(out)) {}
torch_writer::~torch_writer() = default;

std::string torch_writer::begin_storage(dtype type, uint64_t nbytes) {
  std::string key = std::to_string(next_key_++);
  storages_[key] = storage_info{type, nbytes};
  zip_->begin_record(kArchiveRoot + std::string("data/") + key, nbytes);
  return key;
}

void torch_writer::write(const void* data, uint64_t size) { zip_->write(data, size); }
void torch_writer::end_storage() { zip_->end_record(); }

void torch_writer::add_tensor(const std::string& name, const std::string& storage_key, int64_t offset,
                              const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                              std::optional<dtype> type) {
  auto it = storages_.find(storage_key);
  if (it == storages_.end())
    throw error(exit_code::internal,
                fmt::format("torch_writer: tensor '{}' refers to unknown storage {}", name, storage_key));
  const dtype t = type.value_or(it->second.type);
  std::string bounds = check_view_bounds(shape, strides, offset, it->second.nbytes / itemsize(t));
  if (!bounds.empty()) throw error(exit_code::internal, fmt::format("torch_writer: tensor '{}' {}", name, bounds));
  tensors_.push_back(tensor_info{name, storage_key, t, offset, shape, strides});
}

void torch_writer::add_objects(const std::vector<object_entry>& objects) {
  pickle_emitter p;
  object_emitter emit(p);
  for (const auto& e : objects) emit.entry(e);
  objects_pickle_ = std::move(p.bytes);
  objects_ = objects.size();
}

void torch_writer::add_record(const std::string& name, const std::string& bytes) {
  zip_->add(kArchiveRoot + name, bytes.data(), bytes.size());
}

std::string torch_writer::pickle_state_dict() const {
  pickle_emitter p;
  p.proto();
  p.empty_ordered_dict();
  if (!tensors_.empty() || objects_ > 0) {
    p.mark();
    for (const auto& t : tensors_) {
      const storage_info& s = storages_.at(t.storage_key);
      // As torch.save: a typed storage and _rebuild_tensor_v2 where the dtype has a storage class
      // (and fills it with whole elements), else an UntypedStorage of bytes and _rebuild_tensor_v3.
      const bool v3 = needs_rebuild_v3(t.type) || s.nbytes % itemsize(t.type) != 0;
      p.string(t.name);
      p.global("torch._utils", v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
      p.mark();
      p.mark();
      p.string("storage");
      if (v3)
        p.global("torch.storage", "UntypedStorage");
      else
        p.global("torch", storage_class_name(t.type));
      p.string(t.storage_key);
      p.string("cpu");
      p.integer(static_cast<int64_t>(v3 ? s.nbytes : s.nbytes / itemsize(t.type)));
      p.tuple_from_mark();
      p.binpersid();
      p.integer(t.offset);
      p.int_tuple(t.shape);
      p.int_tuple(t.strides);
      p.boolean(false);
      p.empty_ordered_dict();
      if (v3) p.global("torch", dtype_name(t.type));
      p.tuple_from_mark();
      p.reduce();
    }
    p.bytes += objects_pickle_;
    p.setitems();
  }
  p.stop();
  return p.bytes;
}

void torch_writer::finish() {
  const std::string pkl = pickle_state_dict();
  zip_->add(kArchiveRoot + std::string("data.pkl"), pkl.data(), pkl.size());
  zip_->add(kArchiveRoot + std::string("byteorder"), "little", 6);
  zip_->add(kArchiveRoot + std::string("version"), kFormatVersion, 2);
  zip_->finish();
}

void write_torch_state_dict(atomic_file& out, const std::vector<named_tensor>& tensors,
                            const std::vector<object_entry>& objects,
                            const std::map<std::string, std::string>& extra_records) {
  torch_writer writer(out);
  writer.add_objects(objects);
  // A source storage is its owner plus its key within the owner: views of one storage share it.
  std::unordered_map<std::string, std::string> written;
  for (const auto& t : tensors) {
    const tensor_view& v = t.view;
    const std::string id = fmt::format("{}:{}", static_cast<const void*>(v.owner.get()), v.storage_key);
    auto it = written.find(id);
    if (it == written.end()) {
      std::string key = writer.begin_storage(v.type, v.storage_bytes);
      std::vector<uint8_t> assembled;  // a pieced view's bytes (its storage is the tensor, row-major)
      writer.write(v.pieces ? contiguous_data(v, assembled) : v.storage, v.storage_bytes);
      writer.end_storage();
      it = written.emplace(id, key).first;
    }
    writer.add_tensor(t.name, it->second, v.offset, v.shape, v.strides, v.type);
  }
  for (const auto& [name, bytes] : extra_records) writer.add_record(name, bytes);
  writer.finish();
}

}  // namespace swavg
