#include "formats/torch/torchscript.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "formats/pickle/pickle.h"
#include "formats/pickle/unpickler.h"
#include "formats/torch/torch_file.h"
#include "formats/zip/zip_reader.h"
#include "util/checked.h"
#include "util/crc32.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/text.h"

namespace swavg {
namespace {

constexpr const char* kTorchPrefix = "__torch__.";
constexpr const char* kCustomClassPrefix = "__torch__.torch.classes.";  // C++ classes: no code, never modules
constexpr size_t kMaxShownText = 80;

std::string shown(std::string_view s) {
  std::string out(s.substr(0, kMaxShownText));
  if (s.size() > kMaxShownText) out += "...";
  return out;
}

bool is_identifier_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// ---------------------------------------------------------------------------------------------
// Code records: stored or deflated, inflated only up to their declared size and a budget.

uint64_t code_budget(const torchscript_limits& limits, uint64_t file_size) {
  const auto scaled = checked_mul(limits.code_per_input_byte, file_size);
  const auto with_base = scaled ? checked_add(*scaled, limits.code_base) : std::nullopt;
  return with_base ? std::min(*with_base, limits.max_code_total) : limits.max_code_total;
}

std::string inflate_record(const zip_reader& zip, const zip_entry& e, const torchscript_limits& limits, uint64_t total,
                           uint64_t& budget, const std::string& path) {
  if (e.size > limits.max_code_record)
    throw input_error(fmt::format("{}: code record '{}' declares {} bytes; swavg reads code records of at most {}",
                                  path, e.name, e.size, limits.max_code_record));
  if (e.size > budget)
    throw input_error(
        fmt::format("{}: code record '{}' ({} bytes) takes the code read past {} bytes in all "
                    "(code limit: {} bytes per byte of the file + {}, at most {})",
                    path, e.name, e.size, total, limits.code_per_input_byte, limits.code_base, limits.max_code_total));
  budget -= e.size;
  if (e.method == 0) {
    const zip_entry& s = zip.stored(e.name);
    return std::string(reinterpret_cast<const char*>(zip.bytes(s)), s.size);
  }
  if (e.method != 8)
    throw input_error(
        fmt::format("{}: code record '{}' is compressed with method {}; expected stored (0) or "
                    "deflated (8)",
                    path, e.name, e.method));
  std::string out(e.size, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK)
    throw input_error(fmt::format("{}: code record '{}': cannot start inflating", path, e.name));
  // zlib counts in uInt; code records are far below 4 GiB (kMaxTorchScriptCodeRecord), compressed
  // sizes are clamped: what lies past 4 GiB is never needed for a record of that size.
  z.next_in = const_cast<Bytef*>(zip.bytes(e));
  z.avail_in = static_cast<uInt>(std::min<uint64_t>(e.compressed_size, 0xffffffffu));
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(e.size);
  const int rc = inflate(&z, Z_FINISH);
  const uint64_t produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END)
    throw input_error(fmt::format("{}: code record '{}' does not inflate to its declared {} bytes ({})", path, e.name,
                                  e.size,
                                  rc == Z_OK || rc == Z_BUF_ERROR ? "it holds more, or its deflate data ends early"
                                                                  : "its deflate data is corrupt"));
  if (produced != e.size)
    throw input_error(
        fmt::format("{}: code record '{}' inflates to {} bytes, its header says {}", path, e.name, produced, e.size));
  const uint32_t crc = crc32_update(0, out.data(), out.size());
  if (crc != e.crc32)
    throw input_error(
        fmt::format("{}: code record '{}' has CRC-32 {:08x}, its header says {:08x}", path, e.name, crc, e.crc32));
  return out;
}

// ---------------------------------------------------------------------------------------------
// The class scanner.

struct line_cursor {
  std::string_view text;
  size_t pos = 0;
  size_t number = 0;
  bool next(std::string_view& line) {
    if (pos >= text.size()) return false;
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos = end + 1;
    ++number;
    return true;
  }
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Reads `[ "a", "b", ]` starting at `rest` (just after '='), pulling further lines from `lines`
// when the list spans them.
std::vector<std::string> read_name_list(std::string_view rest, line_cursor& lines, const std::string& where) {
  std::vector<std::string> names;
  rest = trim(rest);
  if (rest.empty() || rest.front() != '[')
    throw input_error(fmt::format("{}: expected a list of names in [...], found '{}'", where, shown(rest)));
  rest.remove_prefix(1);
  bool want_name = true;  // a name may come (else only ',' or ']')
  for (;;) {
    rest = trim(rest);
    if (rest.empty()) {
      std::string_view line;
      if (!lines.next(line)) throw input_error(fmt::format("{}: the list of names has no closing ']'", where));
      rest = line;
      continue;
    }
    const char c = rest.front();
    if (c == ']') return names;
    if (c == ',' && !want_name) {
      want_name = true;
      rest.remove_prefix(1);
      continue;
    }
    if ((c == '"' || c == '\'') && want_name) {
      const size_t close = rest.find(c, 1);
      if (close == std::string_view::npos)
        throw input_error(fmt::format("{}: a name in the list has no closing quote: '{}'", where, shown(rest)));
      std::string_view name = rest.substr(1, close - 1);
      if (name.find('\\') != std::string_view::npos)
        throw input_error(
            fmt::format("{}: the name '{}' has an escape, which swavg does not read", where, shown(name)));
      names.emplace_back(name);
      rest.remove_prefix(close + 1);
      want_name = false;
      continue;
    }
    throw input_error(fmt::format("{}: unexpected '{}' in a list of names", where, shown(rest)));
  }
}

}  // namespace

std::map<std::string, torchscript_class> scan_torchscript_classes(const std::string& qualifier, std::string_view source,
                                                                  const std::string& context) {
  std::map<std::string, torchscript_class> classes;
  torchscript_class* current = nullptr;
  std::string current_name;
  size_t body_indent = 0;  // of the current class's statements, once seen
  line_cursor lines{source};
  std::string_view line;
  while (lines.next(line)) {
    if (line.empty()) continue;
    if (line.front() != ' ' && line.front() != '\t') {
      current = nullptr;
      body_indent = 0;
      if (!starts_with(line, "class ")) continue;
      std::string_view rest = line.substr(6);
      size_t n = 0;
      while (n < rest.size() && is_identifier_char(rest[n])) ++n;
      if (n == 0)
        throw input_error(
            fmt::format("{}, line {}: a class statement without a name: '{}'", context, lines.number, shown(line)));
      current_name = qualifier + "." + std::string(rest.substr(0, n));
      rest = trim(rest.substr(n));
      std::string_view base;
      if (!rest.empty() && rest.front() == '(') {
        const size_t close = rest.find(')');
        if (close != std::string_view::npos) base = trim(rest.substr(1, close - 1));
      }
      auto [it, fresh] = classes.emplace(current_name, torchscript_class{});
      if (!fresh)
        throw input_error(fmt::format("{}, line {}: class '{}' is defined twice", context, lines.number, current_name));
      current = &it->second;
      current->is_module = base == "Module";
      continue;
    }
    if (!current) continue;
    // Only the class's own statements (its first indentation level), not its methods' bodies.
    const size_t indent = line.find_first_not_of(" \t");
    if (indent == std::string_view::npos) continue;
    if (!body_indent) body_indent = indent;
    if (indent != body_indent) continue;
    const std::string_view body = trim(line);
    for (const bool parameters : {true, false}) {
      const std::string_view key = parameters ? "__parameters__" : "__buffers__";
      if (!starts_with(body, key)) continue;
      std::string_view rest = trim(body.substr(key.size()));
      if (rest.empty() || rest.front() != '=') continue;
      const std::string where = fmt::format("{}, line {}: {} of class '{}'", context, lines.number, key, current_name);
      bool& seen = parameters ? current->has_parameters : current->has_buffers;
      if (seen) throw input_error(where + " is declared twice");
      seen = true;
      (parameters ? current->parameters : current->buffers) = read_name_list(rest.substr(1), lines, where);
    }
    if (starts_with(body, "def __setstate__(") || starts_with(body, "def __setstate__ (")) current->has_setstate = true;
  }
  return classes;
}

namespace {

// ---------------------------------------------------------------------------------------------
// The classes of one archive, read from code/ on demand (each record at most once).

class class_index {
 public:
  class_index(const zip_reader& zip, const std::string& prefix, const std::string& path,
              const torchscript_limits& limits, uint64_t file_size)
      : zip_(zip),
        code_(prefix + "code/"),
        path_(path),
        limits_(limits),
        total_(code_budget(limits, file_size)),
        budget_(total_) {}

  // nullptr when no code record defines it.
  const torchscript_class* find(const std::string& qualified) {
    auto it = classes_.find(qualified);
    if (it != classes_.end()) return &it->second;
    const size_t dot = qualified.rfind('.');
    if (dot == std::string::npos) return nullptr;
    const std::string record = record_of(qualified);
    if (!scanned_.insert(record).second) return nullptr;
    const zip_entry* e = zip_.find(record);
    if (!e) return nullptr;
    const std::string text = inflate_record(zip_, *e, limits_, total_, budget_, path_);
    for (auto& [name, c] : scan_torchscript_classes(qualified.substr(0, dot), text, path_ + ": " + record))
      classes_.emplace(name, std::move(c));
    it = classes_.find(qualified);
    return it == classes_.end() ? nullptr : &it->second;
  }

  // __torch__.a.b.C is defined in code/__torch__/a/b.py.
  std::string record_of(const std::string& qualified) const {
    const size_t dot = qualified.rfind('.');
    std::string record = code_ + qualified.substr(0, dot == std::string::npos ? 0 : dot) + ".py";
    for (size_t i = code_.size(); i + 3 < record.size(); ++i)
      if (record[i] == '.') record[i] = '/';
    return record;
  }

 private:
  const zip_reader& zip_;
  std::string code_;
  const std::string& path_;
  const torchscript_limits& limits_;
  uint64_t total_;   // what all code records may inflate to
  uint64_t budget_;  // what is left of it
  std::unordered_map<std::string, torchscript_class> classes_;
  std::unordered_set<std::string> scanned_;
};

// ---------------------------------------------------------------------------------------------
// The module tree.

// The qualified class of a __torch__ object (GLOBAL + NEWOBJ/REDUCE), else empty.
std::string torch_class_of(const pickle_node* n) {
  if (!n || n->kind != pickle_kind::opaque || !n->call || !n->call->callee) return {};
  const pickle_node* callee = n->call->callee;
  if (callee->kind != pickle_kind::global || !starts_with(callee->text, kTorchPrefix)) return {};
  return callee->text;
}

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string module_label(const std::string& prefix) {
  return prefix.empty() ? "the top-level module" : "module '" + prefix + "'";
}

class module_walker {
 public:
  module_walker(const torch_archive& archive, class_index& classes, int max_depth, state_dict& out)
      : path_(archive.file->path()),
        reader_(archive_storages(archive)),
        classes_(classes),
        max_depth_(max_depth),
        out_(out) {}

  void walk(const pickle_node* object, const std::string& prefix, int depth) {
    if (depth > max_depth_)
      throw input_error(fmt::format("{}: {} is nested {} modules deep; swavg reads at most {}", path_,
                                    module_label(prefix), depth, max_depth_));
    if (!visited_.insert(object).second)
      throw input_error(
          fmt::format("{}: {} is a module object already met elsewhere in data.pkl (shared through the "
                      "pickle memo, or a cycle); torch.jit.save writes each module once",
                      path_, module_label(prefix)));
    const std::string type = torch_class_of(object);
    const torchscript_class* cls = module_class(type, prefix);
    const pickle_node* state = object->call->state;
    if (cls->has_setstate)
      throw input_error(
          fmt::format("{}: {} is a '{}', which defines __setstate__: its attributes are made by running "
                      "its code at load time, which swavg never does",
                      path_, module_label(prefix), type));
    if (!state || state->kind != pickle_kind::dict)
      throw input_error(fmt::format("{}: {} ('{}') has {} as its state, expected a dict of attributes", path_,
                                    module_label(prefix), type,
                                    state ? pickle_type_name(*state) : std::string("no BUILD")));
    std::unordered_map<std::string, const pickle_node*> attributes;
    for (const auto& [k, v] : state->entries) {
      if (!k || k->kind != pickle_kind::string)
        throw input_error(fmt::format("{}: {} ('{}') has an attribute named by a {}, expected a string", path_,
                                      module_label(prefix), type, k ? pickle_type_name(*k) : "None"));
      attributes.emplace(k->text, v);
    }
    const std::unordered_set<std::string> parameters(cls->parameters.begin(), cls->parameters.end());
    const std::unordered_set<std::string> buffers(cls->buffers.begin(), cls->buffers.end());
    for (const auto& names : {&cls->parameters, &cls->buffers})
      for (const auto& name : *names)
        if (!attributes.count(name))
          throw input_error(fmt::format("{}: {} ('{}') declares {} '{}', which its state does not hold", path_,
                                        module_label(prefix), type, names == &cls->parameters ? "parameter" : "buffer",
                                        name));
    for (const auto& name : cls->parameters)
      if (buffers.count(name))
        throw input_error(fmt::format("{}: {} ('{}') declares '{}' as both a parameter and a buffer", path_,
                                      module_label(prefix), type, name));
    // Attribute order, as LibTorch's slots: parameters, then buffers, then submodules.
    for (const tensor_kind kind : {tensor_kind::parameter, tensor_kind::buffer}) {
      const auto& declared = kind == tensor_kind::parameter ? parameters : buffers;
      for (const auto& [k, v] : state->entries) {
        if (!declared.count(k->text) || !v || v->kind == pickle_kind::none) continue;
        if (v->kind != pickle_kind::tensor)
          throw input_error(fmt::format("{}: {} '{}' is a {}, expected a tensor", path_,
                                        kind == tensor_kind::parameter ? "parameter" : "buffer",
                                        join_name(prefix, k->text), pickle_type_name(*v)));
        add_tensor(join_name(prefix, k->text), *v->tensor, kind);
      }
    }
    for (const auto& [k, v] : state->entries) {
      if (parameters.count(k->text) || buffers.count(k->text)) continue;
      if (is_module(v, join_name(prefix, k->text))) walk(v, join_name(prefix, k->text), depth + 1);
    }
  }

 private:
  const torchscript_class* module_class(const std::string& type, const std::string& prefix) {
    if (type.empty())
      throw input_error(fmt::format("{}: {} is not a TorchScript object (a __torch__.* class built by NEWOBJ)", path_,
                                    module_label(prefix)));
    const torchscript_class* cls = classes_.find(type);
    if (!cls)
      throw input_error(fmt::format("{}: {} is a '{}', whose class is not defined in '{}'", path_, module_label(prefix),
                                    type, classes_.record_of(type)));
    if (!cls->is_module)
      throw input_error(
          fmt::format("{}: {} is a '{}', which is not declared as a Module", path_, module_label(prefix), type));
    if (!cls->has_parameters || !cls->has_buffers)
      throw input_error(
          fmt::format("{}: class '{}' ({}) does not declare {}; torch.jit.save writes both "
                      "__parameters__ and __buffers__ for every module class",
                      path_, type, classes_.record_of(type), cls->has_parameters ? "__buffers__" : "__parameters__"));
    return cls;
  }

  // Submodules are attributes holding objects of module classes; other objects (TorchScript
  // classes, C++ custom classes) are values LibTorch's state_dict() skips too.
  bool is_module(const pickle_node* v, const std::string& name) {
    const std::string type = torch_class_of(v);
    if (type.empty() || starts_with(type, kCustomClassPrefix)) return false;
    const torchscript_class* cls = classes_.find(type);
    if (!cls)
      throw input_error(fmt::format("{}: attribute '{}' is a '{}', whose class is not defined in '{}'", path_, name,
                                    type, classes_.record_of(type)));
    return cls->is_module;
  }

  void add_tensor(const std::string& name, const pickle_tensor_ref& t, tensor_kind kind) {
    if (!names_.insert(name).second) throw input_error(fmt::format("{}: tensor name '{}' appears twice", path_, name));
    out_.tensors.push_back(named_tensor{name, reader_.view_of(fmt::format("tensor '{}'", name), t), kind});
  }

  const std::string& path_;
  torch_storage_reader reader_;
  class_index& classes_;
  int max_depth_;
  state_dict& out_;
  std::unordered_set<const pickle_node*> visited_;
  std::unordered_set<std::string> names_;
};

torch_archive open_torchscript_archive(const std::shared_ptr<const mapped_file>& file) {
  const std::string& path = file->path();
  torch_archive a;
  a.file = file;
  a.zip = std::make_unique<zip_reader>(read_zip(*file));
  if (!is_torchscript_archive(*a.zip))
    throw input_error(
        fmt::format("{}: is a torch.save checkpoint, not a TorchScript archive (no code/ or "
                    "constants.pkl records)",
                    path));
  a.prefix = a.zip->root() + "/";
  for (const char* name : {"byteorder", ".data/byteorder"}) {
    const zip_entry* order = a.zip->find(a.prefix + name);
    if (!order) continue;
    const zip_entry& e = a.zip->stored(order->name);
    const std::string value(reinterpret_cast<const char*>(a.zip->bytes(e)), std::min<uint64_t>(e.size, 64));
    if (value != "little")
      throw input_error(fmt::format("{}: record '{}' says '{}'; swavg reads little-endian archives only", path,
                                    order->name, shown(value)));
  }
  const zip_entry& pkl = a.zip->stored(a.prefix + "data.pkl");
  a.doc = unpickle(a.zip->bytes(pkl), pkl.size, fmt::format("{}: {}", path, pkl.name));
  return a;
}

}  // namespace

state_dict read_torchscript(const std::shared_ptr<const mapped_file>& file, const torchscript_limits& limits) {
  torch_archive archive = open_torchscript_archive(file);
  state_dict sd;
  sd.path = file->path();
  sd.format = file_format::torchscript;
  class_index classes(*archive.zip, archive.prefix, sd.path, limits, file->size());
  module_walker(archive, classes, limits.max_depth, sd).walk(archive.doc->root(), "", 0);
  return sd;
}

state_dict read_torchscript(const std::string& path) {
  auto file = mapped_file::open(path);
  if (!looks_like_zip(file->data(), file->size()))
    throw input_error(fmt::format("{}: is not a TorchScript archive (torch.jit.save writes a ZIP archive)", path));
  return read_torchscript(file);
}

}  // namespace swavg
