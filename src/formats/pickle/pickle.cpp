// The pickle document (its arena of nodes) and type names for messages.
#include "formats/pickle/pickle.h"

namespace swavg {

pickle_node* pickle_document::make(pickle_kind kind) {
  nodes_.push_back(std::make_unique<pickle_node>());
  nodes_.back()->kind = kind;
  return nodes_.back().get();
}

void pickle_document::note_opaque(const std::string& name) {
  if (opaque_seen_.insert(name).second) opaque_globals_.push_back(name);
}

void pickle_document::note_global(const std::string& name) {
  if (named_seen_.insert(name).second) named_globals_.push_back(name);
}

std::string pickle_type_name(const pickle_node& n) {
  switch (n.kind) {
    case pickle_kind::none: return "None";
    case pickle_kind::boolean: return "bool";
    case pickle_kind::integer:
    case pickle_kind::big_integer: return "int";
    case pickle_kind::floating: return "float";
    case pickle_kind::string: return "str";
    case pickle_kind::bytes: return "bytes";
    case pickle_kind::list: return "list";
    case pickle_kind::tuple: return "tuple";
    case pickle_kind::set: return "set";
    case pickle_kind::dict: return n.ordered ? "OrderedDict" : "dict";
    case pickle_kind::global: return "global";
    case pickle_kind::storage: return "storage";
    case pickle_kind::tensor: return "tensor";
    case pickle_kind::opaque: return n.text;
  }
  return "unknown";
}

}  // namespace swavg
