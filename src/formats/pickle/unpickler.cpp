// unpickle() and its stack machine: one case per opcode (step), the allow-listed callables, the memo,
// interned keys and the memory budget (see unpickler.h and pickle.h).
#include "formats/pickle/unpickler.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "formats/pickle/pickle_literals.h"
#include "formats/pickle/pickle_opcodes.h"
#include "util/checked.h"
#include "util/error.h"

namespace swavg {

std::unique_ptr<pickle_document> unpickle(const uint8_t* data, size_t size, const std::string& context,
                                          const unpickle_limits& limits) {
  if (!data) size = 0;
  static const uint8_t kEmpty = 0;
  return unpickler(data ? data : &kEmpty, size, context, limits).run();
}

using namespace pickle_op;

namespace {

constexpr int kHighestProtocol = 5;
// Dicts and sets up to this size find duplicate keys by a linear scan, larger ones by a hash index.
constexpr size_t kLinearKeyScan = 8;
// What the memory budget counts for each thing the parser allocates (heap overhead included).
constexpr uint64_t kNodeCost = sizeof(pickle_node) + sizeof(std::unique_ptr<pickle_node>) + 16;
constexpr uint64_t kSlotCost = sizeof(pickle_node*);
constexpr uint64_t kEntryCost = sizeof(std::pair<pickle_node*, pickle_node*>);
constexpr uint64_t kHashEntryCost = 64;  // one entry of an unordered_map, bucket included
constexpr uint64_t kMib = uint64_t{1} << 20;

std::string hex_byte(uint8_t b) {
  static const char kHex[] = "0123456789abcdef";
  return std::string("0x") + kHex[b >> 4] + kHex[b & 15];
}

}  // namespace

unpickler::unpickler(const uint8_t* data, size_t size, const std::string& context, const unpickle_limits& limits)
    : data_(data),
      size_(size),
      context_(context),
      limits_(limits),
      budget_(memory_budget(size, limits)),
      doc_(std::make_unique<pickle_document>()) {}

std::unique_ptr<pickle_document> unpickler::run() {
  while (true) {
    op_pos_ = pos_;
    if (pos_ >= size_) fail_plain("data ends without STOP");
    op_ = data_[pos_++];
    if (op_ == kStop) {
      doc_->set_root(pop());
      doc_->set_charged_bytes(charged_);
      doc_->set_consumed(pos_);
      return std::move(doc_);
    }
    step();
  }
}

uint64_t unpickler::memory_budget(size_t size, const unpickle_limits& l) {
  const auto scaled = checked_mul(static_cast<uint64_t>(size), l.bytes_per_input_byte);
  const auto total = scaled ? checked_add(*scaled, l.base_bytes) : std::nullopt;
  return total ? std::min(*total, l.max_bytes) : l.max_bytes;
}

// Counts `bytes` about to be allocated for the document against the budget.
void unpickler::charge(uint64_t bytes) {
  charged_ += bytes;
  if (charged_ > budget_)
    fail(fmt::format(
        "memory limit: the objects built so far need {} bytes, more than the {} allowed for a "
        "{}-byte pickle ({} bytes per byte + {} MiB, at most {} MiB)",
        charged_, budget_, size_, limits_.bytes_per_input_byte, limits_.base_bytes / kMib, limits_.max_bytes / kMib));
}

void unpickler::set_text(pickle_node* n, std::string text) {
  charge(text.size());
  n->text = std::move(text);
}

void unpickler::append_items(pickle_node* n, const std::vector<pickle_node*>& items) {
  charge(items.size() * kSlotCost);
  n->items.insert(n->items.end(), items.begin(), items.end());
}

void unpickler::append_item(pickle_node* n, pickle_node* x) {
  charge(kSlotCost);
  n->items.push_back(x);
}

void unpickler::append_entry(pickle_node* n, pickle_node* k, pickle_node* v) {
  charge(kEntryCost);
  n->entries.emplace_back(k, v);
}

void unpickler::fail_plain(const std::string& what) const {
  std::string m = context_.empty() ? std::string() : context_ + ": ";
  m += fmt::format("at byte {}: {}", op_pos_, what);
  throw input_error(m);
}

void unpickler::fail(const std::string& what) const {
  const char* name = opcode_name(op_);
  fail_plain(fmt::format("opcode {} ({}): {}", name ? name : "?", hex_byte(op_), what));
}

// A literal decoder's result; its pickle_literal_error fails this opcode.
template <typename Decode>
auto unpickler::decoded(Decode&& decode) const {
  try {
    return decode();
  } catch (const pickle_literal_error& e) {
    fail(e.what());
  }
}

const uint8_t* unpickler::take(uint64_t n) {
  if (n > size_ - pos_) fail("unexpected end of data");
  const uint8_t* p = data_ + pos_;
  pos_ += static_cast<size_t>(n);
  return p;
}

uint8_t unpickler::u8() { return *take(1); }

uint16_t unpickler::u16() { return load_le<uint16_t>(take(2)); }

uint32_t unpickler::u32() { return load_le<uint32_t>(take(4)); }

uint64_t unpickler::u64() { return load_le<uint64_t>(take(8)); }

int32_t unpickler::i32() { return load_le<int32_t>(take(4)); }

// One text argument: the bytes up to the next newline, which is consumed.
std::string_view unpickler::line() {
  const void* nl = std::memchr(data_ + pos_, '\n', size_ - pos_);
  if (!nl) fail("unterminated line");
  const size_t end = static_cast<const uint8_t*>(nl) - data_;
  std::string_view s(reinterpret_cast<const char*>(data_ + pos_), end - pos_);
  pos_ = end + 1;
  return s;
}

pickle_node* unpickler::node(pickle_kind kind) {
  if (++nodes_made_ > limits_.max_nodes) fail(fmt::format("too many objects (limit {})", limits_.max_nodes));
  charge(kNodeCost);
  return doc_->make(kind);
}

pickle_node* unpickler::shared(pickle_node*& slot, pickle_kind kind) {
  if (!slot) slot = node(kind);
  return slot;
}

pickle_node* unpickler::boolean(bool v) {
  pickle_node* n = shared(v ? true_ : false_, pickle_kind::boolean);
  n->bool_value = v;
  return n;
}

pickle_node* unpickler::integer(int64_t v) {
  if (v >= 0 && v < static_cast<int64_t>(small_ints_.size())) {
    pickle_node* n = shared(small_ints_[static_cast<size_t>(v)], pickle_kind::integer);
    n->int_value = v;
    return n;
  }
  pickle_node* n = node(pickle_kind::integer);
  n->int_value = v;
  return n;
}

size_t unpickler::frame_base() const { return marks_.empty() ? 0 : marks_.back(); }

void unpickler::push(pickle_node* n) {
  if (stack_.size() + marks_.size() >= limits_.max_stack)
    fail(fmt::format("stack too deep (limit {})", limits_.max_stack));
  stack_.push_back(n);
}

pickle_node* unpickler::pop() {
  if (stack_.size() <= frame_base()) fail("stack underflow");
  pickle_node* n = stack_.back();
  stack_.pop_back();
  return n;
}

pickle_node* unpickler::top() {
  if (stack_.size() <= frame_base()) fail("stack underflow");
  return stack_.back();
}

std::vector<pickle_node*> unpickler::pop_mark() {
  if (marks_.empty()) fail("MARK missing");
  const size_t begin = marks_.back();
  marks_.pop_back();
  std::vector<pickle_node*> items(stack_.begin() + static_cast<std::ptrdiff_t>(begin), stack_.end());
  stack_.resize(begin);
  return items;
}

void unpickler::memo_put(uint64_t key, pickle_node* n) {
  if (key < memo_vec_.size()) {
    memo_vec_[key] = n;
    return;
  }
  auto it = memo_map_.find(key);
  if (it != memo_map_.end()) {
    it->second = n;
    return;
  }
  if (memo_vec_.size() + memo_map_.size() >= limits_.max_memo)
    fail(fmt::format("too many memo entries (limit {})", limits_.max_memo));
  if (key == memo_vec_.size()) {
    charge(kSlotCost);
    memo_vec_.push_back(n);
  } else {
    charge(kHashEntryCost);
    memo_map_.emplace(key, n);
  }
}

pickle_node* unpickler::memo_get(uint64_t key) {
  if (key < memo_vec_.size()) return memo_vec_[key];
  auto it = memo_map_.find(key);
  if (it == memo_map_.end()) fail(fmt::format("memo key {} not found", key));
  return it->second;
}

uint64_t unpickler::memo_index_text() {
  const std::string_view s = line();
  return decoded([&] { return pickle_literal::decode_memo_index(s); });
}

// The interned id of a node as a key: equal scalars share one (a str, bytes or big int is hashed
// once per node); any other node (a tuple, an opaque object, NaN) is its own key, as Python finds
// an object by identity first, so one memoised object set again and again stays one entry.
uint64_t unpickler::key_id(const pickle_node* n) {
  auto cached = node_key_ids_.find(n);
  if (cached != node_key_ids_.end()) return cached->second;
  const std::optional<pickle_key> k = pickle_scalar_key(*n);
  uint64_t id = next_key_id_;
  if (k) {
    auto [it, fresh] = key_ids_.emplace(*k, next_key_id_);
    if (fresh) charge(kHashEntryCost);
    id = it->second;
  }
  if (id == next_key_id_) ++next_key_id_;
  if (!k || pickle_key_has_text(*n)) {
    charge(kHashEntryCost);
    node_key_ids_.emplace(n, id);
  }
  return id;
}

// Inserts into a dict (entries) or set (items), replacing an equal scalar key as Python does.
void unpickler::insert_keyed(pickle_node* container, pickle_node* key, pickle_node* value) {
  const bool is_dict = container->kind == pickle_kind::dict;
  const size_t size = is_dict ? container->entries.size() : container->items.size();
  auto key_at = [&](size_t i) { return is_dict ? container->entries[i].first : container->items[i]; };
  auto replace_at = [&](size_t i) {
    if (is_dict) container->entries[i].second = value;
  };
  auto append = [&] {
    if (is_dict)
      append_entry(container, key, value);
    else
      append_item(container, key);
  };
  const uint64_t id = key_id(key);
  auto idx = key_index_.find(container);
  if (idx == key_index_.end() && size < kLinearKeyScan) {
    for (size_t i = 0; i < size; ++i) {
      if (key_id(key_at(i)) == id) {
        replace_at(i);
        return;
      }
    }
    append();
    return;
  }
  if (idx == key_index_.end()) {
    idx = key_index_.emplace(container, std::unordered_map<uint64_t, size_t>()).first;
    charge(size * kHashEntryCost);
    for (size_t i = 0; i < size; ++i) idx->second.emplace(key_id(key_at(i)), i);
  }
  auto [slot, fresh] = idx->second.emplace(id, size);
  if (fresh) {
    charge(kHashEntryCost);
    append();
  } else {
    replace_at(slot->second);
  }
}

// A copy's work is counted as well as what it adds: each element visited costs a slot, so that
// dict(L) or set(L) of one memoised item repeated costs what L costs, though it adds one entry.
void unpickler::fill_from_pairs(pickle_node* dict, pickle_node* source, const char* callable) {
  charge((source->kind == pickle_kind::dict ? source->entries.size() : source->items.size()) * kSlotCost);
  if (source->kind == pickle_kind::dict) {
    for (const auto& [k, v] : source->entries) insert_keyed(dict, k, v);
    return;
  }
  if (source->kind != pickle_kind::list && source->kind != pickle_kind::tuple)
    fail(fmt::format("bad argument for {}: {}", callable, pickle_type_name(*source)));
  for (pickle_node* pair : source->items) {
    if ((pair->kind != pickle_kind::tuple && pair->kind != pickle_kind::list) || pair->items.size() != 2)
      fail(fmt::format("bad argument for {}: expected key-value pairs", callable));
    insert_keyed(dict, pair->items[0], pair->items[1]);
  }
}

void unpickler::fill_from_iterable(pickle_node* out, pickle_node* source, const char* callable) {
  const bool keyed = out->kind == pickle_kind::set;
  if (keyed) charge((source->kind == pickle_kind::dict ? source->entries.size() : source->items.size()) * kSlotCost);
  auto add = [&](pickle_node* x) {
    if (keyed)
      insert_keyed(out, x, nullptr);
    else
      append_item(out, x);
  };
  switch (source->kind) {
    case pickle_kind::list:
    case pickle_kind::tuple:
    case pickle_kind::set:
      for (pickle_node* x : source->items) add(x);
      break;
    case pickle_kind::dict:
      for (const auto& kv : source->entries) add(kv.first);
      break;
    default: fail(fmt::format("bad argument for {}: {}", callable, pickle_type_name(*source)));
  }
}

bool unpickler::is_builtin(const std::string& name, const char* what) {
  const size_t dot = name.find('.');
  if (dot == std::string::npos) return false;
  const std::string_view module(name.data(), dot);
  return (module == "builtins" || module == "__builtin__") && name.compare(dot + 1, std::string::npos, what) == 0;
}

int64_t unpickler::int_arg(const pickle_node* n, const char* what) {
  if (n->kind == pickle_kind::big_integer) fail(fmt::format("tensor {} has an entry outside the int64 range", what));
  if (n->kind != pickle_kind::integer) fail(fmt::format("tensor {} is {}, not int", what, pickle_type_name(*n)));
  return n->int_value;
}

std::vector<int64_t> unpickler::int_tuple_arg(const pickle_node* n, const char* what) {
  if (n->kind != pickle_kind::tuple && n->kind != pickle_kind::list)
    fail(fmt::format("tensor {} is {}, not a tuple", what, pickle_type_name(*n)));
  std::vector<int64_t> out;
  charge(n->items.size() * sizeof(int64_t));
  out.reserve(n->items.size());
  for (const pickle_node* x : n->items) {
    const int64_t v = int_arg(x, what);
    if (v < 0) fail(fmt::format("tensor {} has a negative entry", what));
    out.push_back(v);
  }
  return out;
}

bool unpickler::bool_arg(const pickle_node* n, const char* what) {
  if (n->kind == pickle_kind::boolean) return n->bool_value;
  if (n->kind == pickle_kind::integer) return n->int_value != 0;
  fail(fmt::format("{} is {}, not bool", what, pickle_type_name(*n)));
}

// _rebuild_tensor(storage, offset, size, stride), _rebuild_tensor_v2(..., requires_grad, hooks
// [, metadata]) and _rebuild_tensor_v3(..., requires_grad, hooks, dtype [, metadata]).
pickle_node* unpickler::rebuild_tensor(const std::vector<pickle_node*>& a, int version) {
  const size_t want = version == 1 ? 4 : version == 2 ? 6 : 7;
  if (a.size() < want || a.size() > want + (version == 1 ? 0 : 1))
    fail(fmt::format("tensor rebuild takes {} arguments, got {}", want, a.size()));
  if (a[0]->kind != pickle_kind::storage)
    fail(fmt::format("tensor storage is {}, not a storage", pickle_type_name(*a[0])));
  charge(sizeof(pickle_tensor_ref) + a[0]->storage->key.size() + a[0]->storage->location.size());
  auto t = std::make_unique<pickle_tensor_ref>();
  t->storage = *a[0]->storage;
  t->type = version == 3 ? dtype_arg(a[6]) : t->storage.type;
  t->offset = int_arg(a[1], "storage offset");
  if (t->offset < 0) fail("tensor storage offset is negative");
  t->shape = int_tuple_arg(a[2], "size");
  t->strides = int_tuple_arg(a[3], "stride");
  if (t->shape.size() != t->strides.size()) fail("tensor size and stride differ in length");
  if (version >= 2) t->requires_grad = bool_arg(a[4], "requires_grad");
  pickle_node* n = node(pickle_kind::tensor);
  n->tensor = std::move(t);
  return n;
}

// A torch.<name> dtype global, as _rebuild_tensor_v3 names it.
dtype unpickler::dtype_arg(const pickle_node* n) {
  if (n->kind != pickle_kind::global) fail(fmt::format("tensor dtype is {}, not a torch dtype", pickle_type_name(*n)));
  const std::string_view name = n->text;
  const std::optional<dtype> t =
      name.substr(0, 6) == "torch." ? dtype_from_name(name.substr(6)) : std::optional<dtype>();
  if (!t) fail(fmt::format("tensor dtype {} is not one torch.save writes", n->text));
  return *t;
}

pickle_node* unpickler::rebuild_parameter(const std::vector<pickle_node*>& a, size_t want) {
  if (a.size() != want) fail(fmt::format("parameter rebuild takes {} arguments, got {}", want, a.size()));
  if (a[0]->kind != pickle_kind::tensor)
    fail(fmt::format("parameter data is {}, not a tensor", pickle_type_name(*a[0])));
  const pickle_tensor_ref& from = *a[0]->tensor;
  charge(sizeof(pickle_tensor_ref) + (from.shape.size() + from.strides.size()) * sizeof(int64_t) +
         from.storage.key.size() + from.storage.location.size() + from.subclass.size());
  pickle_node* n = node(pickle_kind::tensor);
  n->tensor = std::make_unique<pickle_tensor_ref>(from);
  n->tensor->requires_grad = bool_arg(a[1], "requires_grad");
  n->tensor->is_parameter = true;
  return n;
}

pickle_node* unpickler::opaque(const std::string& name) {
  doc_->note_opaque(name);
  pickle_node* n = node(pickle_kind::opaque);
  set_text(n, name);
  return n;
}

pickle_node* unpickler::opaque_call(pickle_node* callee, const std::vector<pickle_node*>& args, bool is_new) {
  pickle_node* n = opaque(callee->text);
  charge(sizeof(pickle_call) + args.size() * kSlotCost);
  n->call = std::make_unique<pickle_call>();
  n->call->callee = callee;
  n->call->args = args;
  n->call->constructed = is_new;
  return n;
}

// The result of calling `callable` with `args` (REDUCE, INST, OBJ) or of cls.__new__(cls, *args)
// (NEWOBJ, NEWOBJ_EX: `is_new`), for the allow-listed callables; an opaque node otherwise.
pickle_node* unpickler::call(pickle_node* callable, const std::vector<pickle_node*>& args, bool is_new) {
  if (callable->kind == pickle_kind::opaque) return opaque_call(callable, args, is_new);
  if (callable->kind != pickle_kind::global)
    fail(fmt::format("calling {}, which is not callable", pickle_type_name(*callable)));
  const std::string& name = callable->text;
  const char* cname = name.c_str();

  const bool ordered = name == "collections.OrderedDict";
  if (ordered || name == "collections.defaultdict" || is_builtin(name, "dict")) {
    pickle_node* d = node(pickle_kind::dict);
    d->ordered = ordered;
    // defaultdict(factory, mapping): the factory is not kept.
    const size_t first = name == "collections.defaultdict" ? 1 : 0;
    if (!is_new && args.size() > first + 1) fail("too many arguments for " + name);
    if (!is_new && args.size() == first + 1) fill_from_pairs(d, args[first], cname);
    return d;
  }
  if (is_builtin(name, "list") || is_builtin(name, "set")) {
    pickle_node* out = node(is_builtin(name, "list") ? pickle_kind::list : pickle_kind::set);
    if (!is_new && args.size() > 1) fail("too many arguments for " + name);
    if (!is_new && args.size() == 1) fill_from_iterable(out, args[0], cname);
    return out;
  }
  if (is_builtin(name, "tuple") || is_builtin(name, "frozenset")) {
    pickle_node* out = node(is_builtin(name, "tuple") ? pickle_kind::tuple : pickle_kind::set);
    if (args.size() > 1) fail("too many arguments for " + name);
    if (args.size() == 1) fill_from_iterable(out, args[0], cname);
    return out;
  }
  if (is_builtin(name, "bytes") || is_builtin(name, "bytearray")) {
    pickle_node* out = node(pickle_kind::bytes);
    if (args.empty()) return out;
    if (args.size() != 1 || args[0]->kind != pickle_kind::bytes) return opaque_call(callable, args, is_new);
    set_text(out, args[0]->text);
    return out;
  }
  if (name == "_codecs.encode") {
    // Protocols 0-2 write bytes as _codecs.encode(latin-1 text, "latin1").
    if (args.size() != 2 || args[0]->kind != pickle_kind::string || args[1]->kind != pickle_kind::string ||
        (args[1]->text != "latin1" && args[1]->text != "latin-1"))
      return opaque_call(callable, args, is_new);
    pickle_node* out = node(pickle_kind::bytes);
    const std::string& s = args[0]->text;
    set_text(out, decoded([&] { return pickle_literal::encode_latin1(s); }));
    return out;
  }
  if (is_tensor_rebuild(name)) return rebuild(name, args);
  if (name == "torch._tensor._rebuild_from_type_v2" && !is_new) return rebuild_from_type(callable, args);
  return opaque_call(callable, args, is_new);
}

bool unpickler::is_tensor_rebuild(const std::string& name) {
  return name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor_v3" ||
         name == "torch._utils._rebuild_tensor" || name == "torch._utils._rebuild_parameter" ||
         name == "torch._utils._rebuild_parameter_with_state";
}

pickle_node* unpickler::rebuild(const std::string& name, const std::vector<pickle_node*>& args) {
  if (name == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(args, 2);
  if (name == "torch._utils._rebuild_tensor_v3") return rebuild_tensor(args, 3);
  if (name == "torch._utils._rebuild_tensor") return rebuild_tensor(args, 1);
  if (name == "torch._utils._rebuild_parameter") return rebuild_parameter(args, 3);
  return rebuild_parameter(args, 4);
}

// torch._tensor._rebuild_from_type_v2(func, new_type, args, state), what torch.save writes for a
// tensor subclass: func(*args) when func is one of the tensor rebuilds; new_type and state stay
// data. Anything else is opaque.
pickle_node* unpickler::rebuild_from_type(pickle_node* callable, const std::vector<pickle_node*>& args) {
  if (args.size() != 4 || args[0]->kind != pickle_kind::global || !is_tensor_rebuild(args[0]->text) ||
      args[2]->kind != pickle_kind::tuple)
    return opaque_call(callable, args, false);
  pickle_node* t = rebuild(args[0]->text, args[2]->items);
  if (args[1]->kind == pickle_kind::global || args[1]->kind == pickle_kind::opaque) {
    charge(args[1]->text.size());
    t->tensor->subclass = args[1]->text;
  }
  return t;
}

const std::vector<pickle_node*>& unpickler::tuple_items(pickle_node* n, const char* what) {
  if (n->kind != pickle_kind::tuple) fail(fmt::format("{} is {}, not a tuple", what, pickle_type_name(*n)));
  return n->items;
}

void unpickler::build(pickle_node* inst, pickle_node* state) {
  if (inst->kind == pickle_kind::opaque) {
    if (inst->call) inst->call->state = state;
    return;
  }
  if (inst->kind != pickle_kind::dict) return;
  auto merge = [&](pickle_node* s) {
    if (s->kind != pickle_kind::dict || s->entries.empty()) return;
    charge(s->entries.size() * kSlotCost);
    if (!inst->attributes) inst->attributes = node(pickle_kind::dict);
    for (const auto& [k, v] : s->entries) insert_keyed(inst->attributes, k, v);
  };
  if (state->kind == pickle_kind::tuple && state->items.size() == 2) {
    merge(state->items[0]);
    merge(state->items[1]);
  } else {
    merge(state);
  }
}

pickle_node* unpickler::persistent_load(pickle_node* pid) {
  auto reject = [&]() -> pickle_node* {
    std::string what = pickle_type_name(*pid);
    if (pid->kind == pickle_kind::string && pid->text.size() <= 64 && pickle_literal::valid_text(pid->text))
      what += fmt::format(" '{}'", pid->text);
    fail("persistent id is not a storage: " + what);
  };
  if (pid->kind != pickle_kind::tuple) return reject();
  const auto& it = pid->items;
  if (it.size() == 6 && it[0]->kind == pickle_kind::string && it[0]->text == "storage" &&
      it[5]->kind != pickle_kind::none)
    fail("persistent id of a storage view (with view metadata, as old PyTorch versions wrote them) is not supported");
  if (it.size() != 5 && !(it.size() == 6 && it[5]->kind == pickle_kind::none)) return reject();
  if (it[0]->kind != pickle_kind::string || it[0]->text != "storage") return reject();
  if (it[1]->kind != pickle_kind::global) return reject();
  std::string_view cls = it[1]->text;
  if (cls.substr(0, 6) != "torch.") return reject();
  cls.remove_prefix(6);
  if (cls.substr(0, 5) == "cuda.") cls.remove_prefix(5);
  std::optional<dtype> type;
  const bool untyped = cls == "UntypedStorage" || cls == "storage.UntypedStorage";
  if (untyped)
    type = dtype::uint8;
  else
    type = dtype_from_storage_class(cls);
  if (!type) fail("persistent id names an unknown storage type " + it[1]->text);
  if (it[2]->kind != pickle_kind::string) fail(fmt::format("storage key is {}, not str", pickle_type_name(*it[2])));
  if (it[3]->kind != pickle_kind::string)
    fail(fmt::format("storage location is {}, not str", pickle_type_name(*it[3])));
  if (it[4]->kind != pickle_kind::integer || it[4]->int_value < 0) fail("storage size is not a non-negative int");
  charge(sizeof(pickle_storage_ref) + it[2]->text.size() + it[3]->text.size());
  pickle_node* n = node(pickle_kind::storage);
  n->storage = std::make_unique<pickle_storage_ref>();
  n->storage->key = it[2]->text;
  n->storage->type = *type;
  n->storage->untyped = untyped;
  n->storage->location = it[3]->text;
  n->storage->numel = static_cast<uint64_t>(it[4]->int_value);
  doc_->note_storage(n->storage.get());
  return n;
}

pickle_node* unpickler::global(std::string_view module, std::string_view name) {
  auto ok = [](std::string_view s) {
    if (s.empty()) return false;
    for (char c : s)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
    return pickle_literal::valid_text(s);
  };
  if (module.size() > limits_.max_name || name.size() > limits_.max_name)
    fail(fmt::format("global name limit: a module or name of {} bytes, more than {}",
                     std::max(module.size(), name.size()), limits_.max_name));
  if (!ok(module) || !ok(name)) fail("bad global name");
  pickle_node* n = node(pickle_kind::global);
  std::string text;
  text.reserve(module.size() + 1 + name.size());
  text.append(module).append(".").append(name);
  set_text(n, std::move(text));
  doc_->note_global(n->text);
  return n;
}

// Decimal text (INT, LONG) as an integer node of any size.
pickle_node* unpickler::decimal(std::string_view s) {
  const std::vector<uint8_t> bytes = decoded([&] { return pickle_literal::decode_decimal(s); });
  return long_node(bytes.data(), bytes.size());
}

pickle_node* unpickler::long_node(const uint8_t* p, size_t len) {
  pickle_literal::long_value v = pickle_literal::decode_long(p, len);
  if (v.fits) return integer(v.value);
  pickle_node* n = node(pickle_kind::big_integer);
  set_text(n, std::move(v.bytes));
  return n;
}

pickle_node* unpickler::float_text(std::string_view s) {
  const double v = decoded([&] { return pickle_literal::decode_float(s); });
  pickle_node* n = node(pickle_kind::floating);
  n->float_value = v;
  return n;
}

// A str from Python 2 (STRING, BINSTRING): text when it is UTF-8, as torch.load decodes it,
// bytes otherwise.
pickle_node* unpickler::py2_string(std::string bytes) {
  const bool utf8 = pickle_literal::valid_text(bytes);
  pickle_node* n = node(utf8 ? pickle_kind::string : pickle_kind::bytes);
  set_text(n, std::move(bytes));
  return n;
}

pickle_node* unpickler::text_node(pickle_kind kind, const uint8_t* p, uint64_t len) {
  pickle_node* n = node(kind);
  charge(len);
  n->text.assign(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
  if (kind == pickle_kind::string && !pickle_literal::valid_text(n->text)) fail("string is not valid UTF-8");
  return n;
}

pickle_node* unpickler::counted(pickle_kind kind, uint64_t len) { return text_node(kind, take(len), len); }

void unpickler::add_items(pickle_node* target, const std::vector<pickle_node*>& items) {
  if (target->kind == pickle_kind::opaque ||
      (target->kind == pickle_kind::list && (op_ == kAppend || op_ == kAppends))) {
    append_items(target, items);
    return;
  }
  if (target->kind == pickle_kind::set && op_ == kAddItems) {
    for (pickle_node* x : items) insert_keyed(target, x, nullptr);
    return;
  }
  fail("cannot add items to " + pickle_type_name(*target));
}

void unpickler::set_items(pickle_node* target, const std::vector<pickle_node*>& kv) {
  if (kv.size() % 2) fail("odd number of items for a dict");
  if (target->kind == pickle_kind::opaque) {
    for (size_t i = 0; i < kv.size(); i += 2) append_entry(target, kv[i], kv[i + 1]);
    return;
  }
  if (target->kind != pickle_kind::dict) fail("cannot set items on " + pickle_type_name(*target));
  for (size_t i = 0; i < kv.size(); i += 2) insert_keyed(target, kv[i], kv[i + 1]);
}

pickle_node* unpickler::sequence(pickle_kind kind, std::vector<pickle_node*> items) {
  if (kind == pickle_kind::tuple && items.empty()) return shared(empty_tuple_, pickle_kind::tuple);
  pickle_node* n = node(kind);
  if (kind == pickle_kind::set) {
    for (pickle_node* x : items) insert_keyed(n, x, nullptr);
  } else {
    charge(items.size() * kSlotCost);
    n->items = std::move(items);
  }
  return n;
}

void unpickler::step() {
  switch (op_) {
    case kProto: {
      const uint8_t v = u8();
      if (v > kHighestProtocol) fail("unsupported protocol " + std::to_string(v));
      break;
    }
    case kFrame: u64(); break;
    case kMark:
      if (stack_.size() + marks_.size() >= limits_.max_stack)
        fail(fmt::format("stack too deep (limit {})", limits_.max_stack));
      marks_.push_back(stack_.size());
      break;
    case kPop:
      if (stack_.size() > frame_base())
        stack_.pop_back();
      else
        pop_mark();
      break;
    case kPopMark: pop_mark(); break;
    case kDup: push(top()); break;

    case kNone: push(shared(none_, pickle_kind::none)); break;
    case kNewTrue:
    case kNewFalse: push(boolean(op_ == kNewTrue)); break;
    case kInt: {
      const std::string_view s = line();
      if (s == "00" || s == "01") {
        push(boolean(s == "01"));
      } else {
        push(decimal(s));
      }
      break;
    }
    case kLong: {
      std::string_view s = line();
      if (!s.empty() && s.back() == 'L') s.remove_suffix(1);
      push(decimal(s));
      break;
    }
    case kBinInt:
    case kBinInt1:
    case kBinInt2: push(integer(op_ == kBinInt ? i32() : op_ == kBinInt1 ? u8() : u16())); break;
    case kLong1:
    case kLong4: {
      uint64_t len;
      if (op_ == kLong1) {
        len = u8();
      } else {
        const int32_t l = i32();
        if (l < 0) fail("negative length");
        len = static_cast<uint64_t>(l);
      }
      const uint8_t* p = take(len);
      push(long_node(p, static_cast<size_t>(len)));
      break;
    }
    case kFloat: push(float_text(line())); break;
    case kBinFloat: {
      const uint8_t* p = take(8);
      pickle_node* n = node(pickle_kind::floating);
      n->float_value = pickle_literal::decode_binfloat(p);
      push(n);
      break;
    }

    case kString: {
      const std::string_view s = line();
      push(py2_string(decoded([&] { return pickle_literal::decode_string(s); })));
      break;
    }
    case kBinString: {
      const int32_t l = i32();
      if (l < 0) fail("negative length");
      const uint8_t* p = take(static_cast<uint64_t>(l));
      push(py2_string(std::string(reinterpret_cast<const char*>(p), static_cast<size_t>(l))));
      break;
    }
    case kShortBinString: {
      const uint8_t l = u8();
      const uint8_t* p = take(l);
      push(py2_string(std::string(reinterpret_cast<const char*>(p), l)));
      break;
    }
    case kUnicode: {
      pickle_node* n = node(pickle_kind::string);
      const std::string_view s = line();
      set_text(n, decoded([&] { return pickle_literal::decode_raw_unicode(s); }));
      push(n);
      break;
    }
    case kShortBinUnicode: push(counted(pickle_kind::string, u8())); break;
    case kBinUnicode: push(counted(pickle_kind::string, u32())); break;
    case kBinUnicode8: push(counted(pickle_kind::string, u64())); break;
    case kShortBinBytes: push(counted(pickle_kind::bytes, u8())); break;
    case kBinBytes: push(counted(pickle_kind::bytes, u32())); break;
    case kBinBytes8:
    case kByteArray8: push(counted(pickle_kind::bytes, u64())); break;

    case kEmptyList: push(node(pickle_kind::list)); break;
    case kEmptyTuple: push(shared(empty_tuple_, pickle_kind::tuple)); break;
    case kEmptyDict: push(node(pickle_kind::dict)); break;
    case kEmptySet: push(node(pickle_kind::set)); break;
    case kList: push(sequence(pickle_kind::list, pop_mark())); break;
    case kTuple: push(sequence(pickle_kind::tuple, pop_mark())); break;
    case kFrozenSet: push(sequence(pickle_kind::set, pop_mark())); break;
    case kTuple1:
    case kTuple2:
    case kTuple3: {
      const size_t n = op_ - kTuple1 + 1;
      if (stack_.size() - frame_base() < n) fail("stack underflow");
      std::vector<pickle_node*> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
      stack_.resize(stack_.size() - n);
      push(sequence(pickle_kind::tuple, std::move(items)));
      break;
    }
    case kDict: {
      const std::vector<pickle_node*> kv = pop_mark();
      pickle_node* d = node(pickle_kind::dict);
      set_items(d, kv);
      push(d);
      break;
    }
    case kAppend: {
      pickle_node* v = pop();
      add_items(top(), {v});
      break;
    }
    case kAppends:
    case kAddItems: {
      const std::vector<pickle_node*> items = pop_mark();
      add_items(top(), items);
      break;
    }
    case kSetItem: {
      pickle_node* v = pop();
      pickle_node* k = pop();
      set_items(top(), {k, v});
      break;
    }
    case kSetItems: {
      const std::vector<pickle_node*> kv = pop_mark();
      set_items(top(), kv);
      break;
    }

    case kGet: push(memo_get(memo_index_text())); break;
    case kBinGet: push(memo_get(u8())); break;
    case kLongBinGet: push(memo_get(u32())); break;
    case kPut: {
      const uint64_t key = memo_index_text();
      memo_put(key, top());
      break;
    }
    case kBinPut: {
      const uint64_t key = u8();
      memo_put(key, top());
      break;
    }
    case kLongBinPut: {
      const uint64_t key = u32();
      memo_put(key, top());
      break;
    }
    case kMemoize: memo_put(memo_vec_.size() + memo_map_.size(), top()); break;

    case kGlobal: {
      const std::string_view module = line();
      const std::string_view name = line();
      push(global(module, name));
      break;
    }
    case kStackGlobal: {
      pickle_node* name = pop();
      pickle_node* module = pop();
      if (module->kind != pickle_kind::string || name->kind != pickle_kind::string) fail("module and name must be str");
      push(global(module->text, name->text));
      break;
    }
    case kInst: {
      const std::string_view module = line();
      const std::string_view name = line();
      pickle_node* cls = global(module, name);
      push(call(cls, pop_mark(), false));
      break;
    }
    case kObj: {
      std::vector<pickle_node*> args = pop_mark();
      if (args.empty()) fail("stack underflow");
      pickle_node* cls = args.front();
      args.erase(args.begin());
      push(call(cls, args, true));
      break;
    }
    case kReduce: {
      pickle_node* args = pop();
      pickle_node* callable = pop();
      push(call(callable, tuple_items(args, "REDUCE argument"), false));
      break;
    }
    case kNewObj: {
      pickle_node* args = pop();
      pickle_node* cls = pop();
      push(call(cls, tuple_items(args, "NEWOBJ argument"), true));
      break;
    }
    case kNewObjEx: {
      pickle_node* kwargs = pop();
      pickle_node* args = pop();
      pickle_node* cls = pop();
      if (kwargs->kind != pickle_kind::dict) fail("NEWOBJ_EX keyword arguments are not a dict");
      pickle_node* made = call(cls, tuple_items(args, "NEWOBJ_EX argument"), true);
      if (made->call) made->call->kwargs = kwargs;
      push(made);
      break;
    }
    case kBuild: {
      pickle_node* state = pop();
      build(top(), state);
      break;
    }
    case kPersId: {
      pickle_node* pid = node(pickle_kind::string);
      set_text(pid, std::string(line()));
      push(persistent_load(pid));
      break;
    }
    case kBinPersId: push(persistent_load(pop())); break;

    case kExt1:
    case kExt2:
    case kExt4: fail("extension codes are not supported");
    case kNextBuffer:
    case kReadonlyBuffer: fail("out-of-band buffers are not supported");
    default: fail_plain("unknown opcode " + hex_byte(op_));
  }
}

}  // namespace swavg
