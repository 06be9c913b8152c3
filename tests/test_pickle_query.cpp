// pickle_query: find_entry, is_sequence, is_tensor, and walk_pickle's order, places, bounds and
// choices, on documents built node by node.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "formats/pickle/pickle.h"
#include "formats/pickle/pickle_query.h"

using namespace swavg;

namespace {

pickle_node* text(pickle_document& doc, pickle_kind kind, const std::string& s) {
  pickle_node* n = doc.make(kind);
  n->text = s;
  return n;
}

pickle_node* str(pickle_document& doc, const std::string& s) { return text(doc, pickle_kind::string, s); }

pickle_node* integer(pickle_document& doc, int64_t v) {
  pickle_node* n = doc.make(pickle_kind::integer);
  n->int_value = v;
  return n;
}

// What a walk visited, as "depth:key-or-index:kind".
std::vector<std::string> visits(const pickle_node* root, const pickle_walk_options& options = {},
                                pickle_kind skipped = pickle_kind::none) {
  std::vector<std::string> out;
  walk_pickle(
      root,
      [&](const pickle_node& n, const pickle_place& at) {
        const std::string where = at.key
                                      ? (at.key->kind == pickle_kind::string ? at.key->text : "<" + at.key->text + ">")
                                      : std::to_string(at.index);
        out.push_back(std::to_string(at.depth) + ":" + where + ":" + pickle_type_name(n));
        return n.kind == skipped ? pickle_visit::skip : pickle_visit::enter;
      },
      options);
  return out;
}

}  // namespace

TEST_CASE("find_entry: a dict's value under a str key, nothing for anything else", "[pickle_query]") {
  pickle_document doc;
  pickle_node* d = doc.make(pickle_kind::dict);
  pickle_node* one = integer(doc, 1);
  pickle_node* two = integer(doc, 2);
  d->entries = {{integer(doc, 7), one}, {str(doc, "b"), two}, {str(doc, "7"), one}};
  CHECK(find_entry(d, "b") == two);
  CHECK(find_entry(d, "7") == one);  // the str key, not the int 7
  CHECK(find_entry(d, "c") == nullptr);
  CHECK(find_entry(nullptr, "b") == nullptr);
  pickle_node* object = text(doc, pickle_kind::opaque, "argparse.Namespace");
  object->entries = d->entries;  // SETITEMed onto an object: not a dict
  CHECK(find_entry(object, "b") == nullptr);
}

TEST_CASE("is_sequence and is_tensor", "[pickle_query]") {
  pickle_document doc;
  CHECK(is_sequence(doc.make(pickle_kind::list)));
  CHECK(is_sequence(doc.make(pickle_kind::tuple)));
  CHECK_FALSE(is_sequence(doc.make(pickle_kind::set)));
  CHECK_FALSE(is_sequence(doc.make(pickle_kind::dict)));
  CHECK_FALSE(is_sequence(nullptr));
  CHECK(is_tensor(doc.make(pickle_kind::tensor)));
  CHECK_FALSE(is_tensor(doc.make(pickle_kind::storage)));
  CHECK_FALSE(is_tensor(nullptr));
}

TEST_CASE("walk_pickle: depth first in document order, each node once", "[pickle_query]") {
  pickle_document doc;
  pickle_node* root = doc.make(pickle_kind::dict);
  pickle_node* list = doc.make(pickle_kind::list);
  pickle_node* shared = str(doc, "s");
  pickle_node* set = doc.make(pickle_kind::set);
  set->items = {integer(doc, 3)};
  list->items = {shared, set, shared, nullptr, root};  // a repeat, a None slot, a cycle
  root->entries = {{str(doc, "a"), list}, {str(doc, "b"), shared}, {str(doc, "c"), integer(doc, 5)}};
  CHECK(visits(root) == std::vector<std::string>{"0:0:dict", "1:a:list", "2:0:str", "2:1:set", "3:0:int", "1:c:int"});
}

TEST_CASE("walk_pickle: an object's contents, and its keys only with object_keys", "[pickle_query]") {
  pickle_document doc;
  pickle_node* object = text(doc, pickle_kind::opaque, "m.C");
  object->call = std::make_unique<pickle_call>();
  object->call->callee = text(doc, pickle_kind::global, "m.C");
  object->call->args = {integer(doc, 1)};
  pickle_node* state = doc.make(pickle_kind::dict);
  state->entries = {{str(doc, "w"), doc.make(pickle_kind::tensor)}};
  object->call->state = state;
  object->items = {integer(doc, 2)};
  pickle_node* root = doc.make(pickle_kind::dict);
  pickle_node* key = text(doc, pickle_kind::opaque, "m.K");
  key->call = std::make_unique<pickle_call>();
  key->call->args = {doc.make(pickle_kind::storage)};
  root->entries = {{key, object}};
  CHECK(visits(root) == std::vector<std::string>{"0:0:dict", "1:<m.K>:m.K", "2:0:storage", "1:<m.K>:m.C", "2:0:int",
                                                 "2:0:int", "2:0:dict", "3:w:tensor"});
  CHECK(visits(root, {-1, false}) ==
        std::vector<std::string>{"0:0:dict", "1:<m.K>:m.C", "2:0:int", "2:0:int", "2:0:dict", "3:w:tensor"});
  // skip: an object's contents are not entered, the object itself is visited
  CHECK(visits(root, {}, pickle_kind::opaque) == std::vector<std::string>{"0:0:dict", "1:<m.K>:m.K", "1:<m.K>:m.C"});
}

TEST_CASE("walk_pickle: max_depth, stop, and nesting far deeper than any stack", "[pickle_query]") {
  pickle_document doc;
  pickle_node* root = doc.make(pickle_kind::list);
  pickle_node* at = root;
  for (int i = 0; i < 1'000'000; ++i) {
    pickle_node* next = doc.make(pickle_kind::list);
    at->items = {next};
    at = next;
  }
  at->items = {doc.make(pickle_kind::tensor)};
  int seen = 0;
  walk_pickle(root, [&](const pickle_node&, const pickle_place&) { return ++seen, pickle_visit::enter; });
  CHECK(seen == 1'000'002);
  seen = 0;
  walk_pickle(root, [&](const pickle_node&, const pickle_place&) { return ++seen, pickle_visit::enter; }, {10, true});
  CHECK(seen == 11);
  seen = 0;
  walk_pickle(root, [&](const pickle_node&, const pickle_place& p) {
    ++seen;
    return p.depth == 5 ? pickle_visit::stop : pickle_visit::enter;
  });
  CHECK(seen == 6);
}

TEST_CASE("walk_pickle: a node first met too deep is visited where it is met within the bound", "[pickle_query]") {
  pickle_document doc;
  pickle_node* shared = str(doc, "deep");
  pickle_node* inner = doc.make(pickle_kind::list);
  inner->items = {shared};
  pickle_node* root = doc.make(pickle_kind::list);
  root->items = {inner, shared};
  CHECK(visits(root, {1, true}) == std::vector<std::string>{"0:0:list", "1:0:list", "1:1:str"});
}
