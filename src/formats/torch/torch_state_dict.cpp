// The state dict in an unpickled torch.save object and its tensors viewed through a checked storage
// table: what the ZIP and the legacy format share (see torch_state_dict.h).
#include "formats/torch/torch_state_dict.h"

#include <fmt/format.h>

#include <map>
#include <unordered_set>

#include "formats/pickle/pickle.h"
#include "formats/pickle/pickle_query.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/listing.h"
#include "util/mapped_file.h"

namespace swavg {

const std::vector<std::string> kStateDictKeys = {"state_dict_ema", "model_ema", "ema", "state_dict", "model", "module"};

namespace {

constexpr int kMaxWalkDepth = 64;
constexpr size_t kMaxListedOpaque = 1000;
constexpr size_t kMaxPathPart = 200;  // bytes of one key in a listed path or message

bool is_dict(const pickle_node* n) { return n && n->kind == pickle_kind::dict; }
bool is_string(const pickle_node* n) { return n && n->kind == pickle_kind::string; }

std::string join(const std::string& path, const std::string& part) { return path.empty() ? part : path + "." + part; }

bool maps_names_to_tensors(const pickle_node* n) {
  if (!is_dict(n) || n->entries.empty()) return false;
  for (const auto& [k, v] : n->entries)
    if (!is_string(k) || !is_tensor(v)) return false;
  return true;
}

bool has_tensors(const pickle_node* n) {
  if (!is_dict(n)) return false;
  for (const auto& [k, v] : n->entries)
    if (is_tensor(v)) return true;
  return false;
}

std::vector<std::string> entry_names(const pickle_node* n) {
  std::vector<std::string> keys;
  if (is_dict(n))
    for (const auto& [k, v] : n->entries) keys.push_back(pickle_key_text(k));
  else if (is_sequence(n))
    for (size_t i = 0; i < n->items.size(); ++i) keys.push_back(std::to_string(i));
  return keys;
}

const pickle_node* child(const pickle_node* n, const std::string& part) {
  if (is_dict(n)) {
    for (const auto& [k, v] : n->entries)
      if (pickle_key_text(k) == part) return v;
    return nullptr;
  }
  if (is_sequence(n)) {
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos || part.size() > 9) return nullptr;
    const size_t i = std::stoul(part);
    return i < n->items.size() ? n->items[i] : nullptr;
  }
  return nullptr;
}

std::string scalar_text(const pickle_node& n) {
  switch (n.kind) {
    case pickle_kind::none: return "None";
    case pickle_kind::boolean: return n.bool_value ? "True" : "False";
    case pickle_kind::integer: return std::to_string(n.int_value);
    case pickle_kind::floating: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.17g", n.float_value);
      return buf;
    }
    case pickle_kind::string: return n.text.size() <= 200 ? n.text : n.text.substr(0, 200) + "...";
    default: return {};
  }
}

// Appends the part of a dotted path that names where a walk met a node: the dict key, `<module.name>`
// for a key that is an object, or the index.
void append_path_part(std::string& path, const pickle_node* k, size_t index) {
  if (!path.empty()) path += '.';
  std::string_view part;
  std::string number;
  if (!k) {
    number = std::to_string(index);
    part = number;
  } else if (k->kind == pickle_kind::string) {
    part = k->text;
  } else if (k->kind == pickle_kind::opaque) {
    path += '<';
    part = k->text;
  } else {
    number = pickle_key_text(k);
    part = number;
  }
  path += cut_text(part, kMaxPathPart);
  if (k && (k->kind == pickle_kind::opaque)) path += '>';
}

// Lists every opaque object (at most kMaxListedOpaque) with its dotted path, kMaxWalkDepth deep at
// most. The path is one buffer cut back to the parent's part and extended per node, each part at
// most kMaxPathPart bytes, so a walk costs O(nodes), not O(nodes x path length).
std::vector<other_entry> collect_opaque(const pickle_node* root) {
  std::vector<other_entry> out;
  std::string path;
  std::vector<size_t> ends;  // the path's length after the part of the node last met at each depth
  walk_pickle(root,
              [&](const pickle_node& n, const pickle_place& at) {
                if (out.size() >= kMaxListedOpaque) return pickle_visit::stop;
                path.resize(at.depth == 0 ? 0 : ends[at.depth - 1]);
                if (at.depth > 0) append_path_part(path, at.key, at.index);
                ends.resize(at.depth + 1);
                ends[at.depth] = path.size();
                if (n.kind != pickle_kind::opaque) return pickle_visit::enter;
                out.push_back(other_entry{path.empty() ? "<top level>" : path, n.text, {}});
                return pickle_visit::skip;
              },
              {kMaxWalkDepth, true});
  return out;
}

// What a tensor that is not a dense, strided one is, by the function torch.save rebuilds it with;
// nullptr for anything else.
const char* non_dense_tensor(const pickle_node* n) {
  if (!n || n->kind != pickle_kind::opaque) return nullptr;
  static const std::pair<const char*, const char*> kKinds[] = {
      {"torch._utils._rebuild_sparse_tensor", "a sparse tensor"},
      {"torch._utils._rebuild_sparse_csr_tensor", "a sparse tensor"},
      {"torch._utils._rebuild_qtensor", "a quantized tensor"},
      {"torch._utils._rebuild_nested_tensor", "a nested tensor"},
      {"torch._utils._rebuild_meta_tensor_no_storage", "a meta tensor (no data)"},
      {"torch._utils._rebuild_wrapper_subclass", "a tensor subclass without storage"},
      {"torch._utils._rebuild_device_tensor_from_numpy", "a device tensor (XLA, ORT, HPU)"},
      {"torch._utils._rebuild_xla_tensor", "a device tensor (XLA)"},
      {"torch._utils._rebuild_mlc_tensor", "a device tensor (MLC)"},
      {"torch._tensor._rebuild_from_type", "a tensor subclass"},
      {"torch._tensor._rebuild_from_type_v2", "a tensor subclass"},
  };
  for (const auto& [name, what] : kKinds)
    if (n->text == name) return what;
  if (n->text.rfind("torch._utils._rebuild", 0) == 0 || n->text.rfind("torch._tensor._rebuild", 0) == 0)
    return "a tensor of a kind swavg does not read";
  return nullptr;
}

}  // namespace

std::string pickle_key_text(const pickle_node* k) {
  if (!k) return "?";
  switch (k->kind) {
    case pickle_kind::string: return k->text;
    case pickle_kind::integer: return std::to_string(k->int_value);
    default: return "<" + pickle_type_name(*k) + ">";
  }
}

const pickle_node* resolve_pickle_path(const pickle_node* root, const std::string& dotted, const std::string& file,
                                       const std::string& option) {
  const pickle_node* node = root;
  std::string rest = dotted, walked;
  while (!rest.empty()) {
    if (!is_dict(node) && !is_sequence(node))
      throw usage_error(fmt::format("{}: {} '{}': '{}' is a {}, not a dict, list or tuple", file, option, dotted,
                                    walked.empty() ? "<top level>" : walked, node ? pickle_type_name(*node) : "None"));
    const pickle_node* next = nullptr;
    size_t used = rest.size();
    for (size_t end = rest.size();;) {
      if ((next = child(node, rest.substr(0, end)))) {
        used = end;
        break;
      }
      const size_t dot = rest.rfind('.', end - 1);
      if (dot == std::string::npos || dot == 0) break;
      end = dot;
    }
    if (!next)
      throw usage_error(fmt::format(
          "{}: {} '{}': no entry '{}' in {}; entries there: {}", file, option, dotted, rest.substr(0, rest.find('.')),
          walked.empty() ? "the top level" : fmt::format("'{}'", walked), quoted_list(entry_names(node))));
    walked = join(walked, rest.substr(0, used));
    rest = used < rest.size() ? rest.substr(used + 1) : "";
    node = next;
  }
  return node;
}

torch_storage_reader::torch_storage_reader(std::shared_ptr<const mapped_file> file, lookup find)
    : file_(std::move(file)), find_(std::move(find)) {}

tensor_view torch_storage_reader::view_of(const std::string& what, const pickle_tensor_ref& t) {
  const std::string& path = file_->path();
  const pickle_storage_ref& s = t.storage;
  auto it = checked_.find(s.key);
  if (it == checked_.end()) {
    storage_record r = find_(s.key);
    auto expected = checked_mul(s.numel, itemsize(s.type));
    if (!expected || *expected != r.size)
      throw input_error(fmt::format("{}: {}: {} holds {} bytes but its {} of {} elements needs {}", path, what, r.name,
                                    r.size, storage_class_of(s), s.numel,
                                    expected ? std::to_string(*expected) : std::string("more than 2^64")));
    it = checked_.emplace(s.key, std::make_pair(s.type, std::move(r))).first;
  } else if (it->second.first != s.type) {
    throw input_error(fmt::format("{}: {}: storage '{}' is used as {} here but as {} elsewhere", path, what, s.key,
                                  dtype_name(s.type), dtype_name(it->second.first)));
  } else if (s.numel != it->second.second.size / itemsize(s.type)) {
    // The record was checked against the first reference's element count; a later reference that
    // declares more would let its view reach past the record.
    throw input_error(fmt::format("{}: {}: storage '{}' is declared with {} elements here but {} elsewhere", path, what,
                                  s.key, s.numel, it->second.second.size / itemsize(s.type)));
  }
  const storage_record& r = it->second.second;
  // A _rebuild_tensor_v3 tensor reads its storage's bytes as its own dtype, as Tensor.set_ does:
  // the whole elements of that dtype the bytes hold.
  const std::string bounds = check_view_bounds(t.shape, t.strides, t.offset, r.size / itemsize(t.type));
  if (!bounds.empty()) throw input_error(fmt::format("{}: {} {}", path, what, bounds));
  tensor_view v;
  v.type = t.type;
  v.shape = t.shape;
  v.strides = t.strides;
  v.offset = t.offset;
  v.storage = r.data;
  v.storage_bytes = r.size;
  v.storage_key = s.key;
  v.owner = file_;
  v.mapping = file_.get();
  return v;
}

state_dict take_state_dict(const std::string& path, std::unique_ptr<pickle_document> doc, torch_storage_reader& reader,
                           const std::string& key) {
  state_dict sd;
  sd.path = path;
  sd.format = file_format::torch;
  sd.opaque = collect_opaque(doc->root());

  const pickle_node* root = doc->root();
  const pickle_node* chosen = nullptr;
  if (!key.empty()) {
    chosen = resolve_pickle_path(root, key, path, "--key");
    if (!is_dict(chosen))
      throw usage_error(fmt::format("{}: --key '{}' holds a value of type {}, expected a dict of tensors", path, key,
                                    chosen ? pickle_type_name(*chosen) : "None"));
    sd.key = key;
  } else if (maps_names_to_tensors(root)) {
    chosen = root;
  } else {
    for (const auto& k : kStateDictKeys) {
      const pickle_node* v = find_entry(root, k);
      if (has_tensors(v)) {
        chosen = v;
        sd.key = k;
        break;
      }
    }
    if (!chosen && has_tensors(root)) chosen = root;
    if (!chosen) {
      std::string what = is_dict(root) ? "top-level keys: " + quoted_list(entry_names(root))
                                       : "the top level is a " + pickle_type_name(*root);
      throw input_error(
          fmt::format("{}: no state dict found (expected a dict of tensors at the top level or under one "
                      "of {}); {}; choose one with --key",
                      path, quoted_list(kStateDictKeys), what));
    }
  }

  std::unordered_set<std::string> names;
  for (const auto& [k, v] : chosen->entries) {
    if (const char* what = non_dense_tensor(v))
      throw input_error(fmt::format("{}: '{}' is {} ({}); swavg averages dense tensors only", path, pickle_key_text(k),
                                    what, v->text));
    if (is_tensor(v) && !is_string(k))
      throw input_error(
          fmt::format("{}: the state dict holds a tensor under the key {} of type {}; swavg needs "
                      "string names for tensors",
                      path, pickle_key_text(k), k ? pickle_type_name(*k) : "None"));
    if (is_tensor(v)) {
      if (!names.insert(k->text).second)
        throw input_error(fmt::format("{}: tensor name '{}' appears twice", path, k->text));
      tensor_kind kind = v->tensor->is_parameter ? tensor_kind::parameter : tensor_kind::unknown;
      sd.tensors.push_back(
          named_tensor{k->text, reader.view_of(fmt::format("tensor '{}'", k->text), *v->tensor), kind});
    } else {
      const std::string type = v ? pickle_type_name(*v) : "None";
      sd.others.push_back(other_entry{pickle_key_text(k), type, v ? scalar_text(*v) : ""});
      sd.objects.push_back(object_entry{pickle_key_text(k), type, k, v, path});
      sd.objects.back().string_key = k && k->kind == pickle_kind::string;
    }
  }
  if (!sd.objects.empty()) sd.document = std::shared_ptr<const pickle_document>(std::move(doc));
  return sd;
}

}  // namespace swavg
