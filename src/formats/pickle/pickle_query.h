/*
 * Questions the readers ask of an unpickled document (pickle.h): a dict's value by its str key,
 * whether a node is a tensor or a list/tuple, and a walk over the graph that visits each node once
 * (memo sharing and cycles), without recursion, so that a hostile nesting cannot exhaust the stack.
 */
#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

#include "formats/pickle/pickle.h"

namespace swavg {

// The value under the str key `key` of dict `d`; nullptr when `d` is not a dict or holds no such key.
const pickle_node* find_entry(const pickle_node* d, std::string_view key);

inline bool is_tensor(const pickle_node* n) { return n && n->kind == pickle_kind::tensor; }

// A list or a tuple.
inline bool is_sequence(const pickle_node* n) {
  return n && (n->kind == pickle_kind::list || n->kind == pickle_kind::tuple);
}

// Where a walk met a node: under which dict key (the key itself, for a key that is an object), or
// at which place of a list, tuple, set or call's arguments (key nullptr); depth 0 is the root.
struct pickle_place {
  const pickle_node* key = nullptr;
  size_t index = 0;
  int depth = 0;
};

// What a visit tells the walk: go into the node's contents, pass over them, or end the walk.
enum class pickle_visit { enter, skip, stop };

struct pickle_walk_options {
  int max_depth = -1;       // nodes deeper are not visited (nor marked as met); -1: no limit
  bool object_keys = true;  // also visit a dict's keys that are objects (opaque), each before its value
};

// Visits `root` and what it holds, depth first in document order, each node at most once: the items
// of a list, tuple or set, a dict's values, and an object's items, entries, call arguments and BUILD
// state. Null nodes are not visited.
void walk_pickle(const pickle_node* root,
                 const std::function<pickle_visit(const pickle_node&, const pickle_place&)>& visit,
                 const pickle_walk_options& options = {});

}  // namespace swavg
