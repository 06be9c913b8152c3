// A dict's entry by key, and the one walk over a pickle graph (see pickle_query.h).
#include "formats/pickle/pickle_query.h"

#include <unordered_set>
#include <vector>

namespace swavg {

const pickle_node* find_entry(const pickle_node* d, std::string_view key) {
  if (!d || d->kind != pickle_kind::dict) return nullptr;
  for (const auto& [k, v] : d->entries)
    if (k && k->kind == pickle_kind::string && k->text == key) return v;
  return nullptr;
}

namespace {

struct pending {
  const pickle_node* node;
  pickle_place place;
};

// The contents of `n`, in document order, met at `depth`.
void contents(const pickle_node& n, int depth, bool object_keys, std::vector<pending>& out) {
  for (size_t i = 0; i < n.items.size(); ++i) out.push_back({n.items[i], {nullptr, i, depth}});
  for (const auto& [k, v] : n.entries) {
    if (object_keys && k && k->kind == pickle_kind::opaque) out.push_back({k, {k, 0, depth}});
    out.push_back({v, {k, 0, depth}});
  }
  if (n.call) {
    for (size_t i = 0; i < n.call->args.size(); ++i) out.push_back({n.call->args[i], {nullptr, i, depth}});
    out.push_back({n.call->state, {nullptr, 0, depth}});
  }
}

}  // namespace

void walk_pickle(const pickle_node* root,
                 const std::function<pickle_visit(const pickle_node&, const pickle_place&)>& visit,
                 const pickle_walk_options& options) {
  std::vector<pending> todo{{root, {}}}, found;
  std::unordered_set<const pickle_node*> seen;
  while (!todo.empty()) {
    const pending p = todo.back();
    todo.pop_back();
    if (!p.node || (options.max_depth >= 0 && p.place.depth > options.max_depth) || !seen.insert(p.node).second)
      continue;
    const pickle_visit next = visit(*p.node, p.place);
    if (next == pickle_visit::stop) return;
    if (next == pickle_visit::skip) continue;
    found.clear();
    contents(*p.node, p.place.depth + 1, options.object_keys, found);
    todo.insert(todo.end(), found.rbegin(), found.rend());  // the first on top
  }
}

}  // namespace swavg
