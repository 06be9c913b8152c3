/*
 * unpickle() and the stack machine behind it (the nodes it builds: formats/pickle/pickle.h): one object
 * per parse, run once. It reads the opcodes one after the other, builds nodes in the document's
 * arena, interns dict keys and set members (formats/pickle/pickle_keys.h), decodes literals through
 * formats/pickle/pickle_literals.h, and counts everything it allocates against the memory budget of
 * unpickle_limits.
 */
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/pickle/pickle.h"
#include "formats/pickle/pickle_keys.h"

namespace swavg {

// Parses `size` bytes of pickle data. `context` (e.g. "ckpt.pt: archive/data.pkl") starts every
// error message. Throws input_error for malformed data: truncation, unknown opcode, stack underflow,
// bad memo index, a persistent id that is not a storage, bad tensor arguments. Never executes code.
std::unique_ptr<pickle_document> unpickle(const uint8_t* data, size_t size, const std::string& context,
                                          const unpickle_limits& limits = {});

class unpickler {
 public:
  // `data` (never null), `context` and `limits` must outlive the unpickler.
  unpickler(const uint8_t* data, size_t size, const std::string& context, const unpickle_limits& limits);

  // Parses up to STOP; the unpickler is spent afterwards.
  std::unique_ptr<pickle_document> run();

 private:
  // The memory budget.
  static uint64_t memory_budget(size_t size, const unpickle_limits& l);
  void charge(uint64_t bytes);
  void set_text(pickle_node* n, std::string text);
  void append_items(pickle_node* n, const std::vector<pickle_node*>& items);
  void append_item(pickle_node* n, pickle_node* x);
  void append_entry(pickle_node* n, pickle_node* k, pickle_node* v);

  // Errors, and reading the opcodes' arguments.
  [[noreturn]] void fail_plain(const std::string& what) const;
  [[noreturn]] void fail(const std::string& what) const;
  template <typename Decode>
  auto decoded(Decode&& decode) const;
  const uint8_t* take(uint64_t n);
  uint8_t u8();
  uint16_t u16();
  uint32_t u32();
  uint64_t u64();
  int32_t i32();
  std::string_view line();

  // Nodes, the stack and the memo.
  pickle_node* node(pickle_kind kind);
  pickle_node* shared(pickle_node*& slot, pickle_kind kind);
  pickle_node* boolean(bool v);
  pickle_node* integer(int64_t v);
  size_t frame_base() const;
  void push(pickle_node* n);
  pickle_node* pop();
  pickle_node* top();
  std::vector<pickle_node*> pop_mark();
  void memo_put(uint64_t key, pickle_node* n);
  pickle_node* memo_get(uint64_t key);
  uint64_t memo_index_text();

  // Interned keys, dicts and sets.
  uint64_t key_id(const pickle_node* n);
  void insert_keyed(pickle_node* container, pickle_node* key, pickle_node* value);
  void fill_from_pairs(pickle_node* dict, pickle_node* source, const char* callable);
  void fill_from_iterable(pickle_node* out, pickle_node* source, const char* callable);

  // The allow-listed callables, tensors and storages.
  static bool is_builtin(const std::string& name, const char* what);
  int64_t int_arg(const pickle_node* n, const char* what);
  std::vector<int64_t> int_tuple_arg(const pickle_node* n, const char* what);
  bool bool_arg(const pickle_node* n, const char* what);
  pickle_node* rebuild_tensor(const std::vector<pickle_node*>& a, int version);
  dtype dtype_arg(const pickle_node* n);
  pickle_node* rebuild_parameter(const std::vector<pickle_node*>& a, size_t want);
  pickle_node* opaque(const std::string& name);
  pickle_node* opaque_call(pickle_node* callee, const std::vector<pickle_node*>& args, bool is_new);
  pickle_node* call(pickle_node* callable, const std::vector<pickle_node*>& args, bool is_new);
  static bool is_tensor_rebuild(const std::string& name);
  pickle_node* rebuild(const std::string& name, const std::vector<pickle_node*>& args);
  pickle_node* rebuild_from_type(pickle_node* callable, const std::vector<pickle_node*>& args);
  const std::vector<pickle_node*>& tuple_items(pickle_node* n, const char* what);
  void build(pickle_node* inst, pickle_node* state);
  pickle_node* persistent_load(pickle_node* pid);
  pickle_node* global(std::string_view module, std::string_view name);

  // Literals as nodes.
  pickle_node* decimal(std::string_view s);
  pickle_node* long_node(const uint8_t* p, size_t len);
  pickle_node* float_text(std::string_view s);
  pickle_node* py2_string(std::string bytes);
  pickle_node* text_node(pickle_kind kind, const uint8_t* p, uint64_t len);
  pickle_node* counted(pickle_kind kind, uint64_t len);

  // Containers, and one opcode.
  void add_items(pickle_node* target, const std::vector<pickle_node*>& items);
  void set_items(pickle_node* target, const std::vector<pickle_node*>& kv);
  pickle_node* sequence(pickle_kind kind, std::vector<pickle_node*> items);
  void step();

  const uint8_t* data_;
  size_t size_;
  const std::string& context_;
  const unpickle_limits& limits_;
  const uint64_t budget_;
  uint64_t charged_ = 0;
  std::unique_ptr<pickle_document> doc_;

  size_t pos_ = 0;
  size_t op_pos_ = 0;
  uint8_t op_ = 0;
  size_t nodes_made_ = 0;
  std::vector<pickle_node*> stack_;
  std::vector<size_t> marks_;
  std::vector<pickle_node*> memo_vec_;
  std::unordered_map<uint64_t, pickle_node*> memo_map_;
  std::unordered_map<pickle_key, uint64_t, pickle_key_hash> key_ids_;
  std::unordered_map<const pickle_node*, uint64_t> node_key_ids_;
  uint64_t next_key_id_ = 0;
  std::unordered_map<const pickle_node*, std::unordered_map<uint64_t, size_t>> key_index_;
  pickle_node* none_ = nullptr;
  pickle_node* true_ = nullptr;
  pickle_node* false_ = nullptr;
  pickle_node* empty_tuple_ = nullptr;
  std::array<pickle_node*, 256> small_ints_{};
};

}  // namespace swavg
