#include "formats/dcp/dcp_input.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <map>
#include <unordered_set>

#include "formats/dcp/dcp_metadata.h"
#include "formats/pickle/pickle.h"
#include "formats/pickle/pickle_query.h"
#include "formats/torch/torch_file.h"
#include "formats/zip/zip_reader.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/paths.h"

namespace swavg {
namespace {

constexpr const char* kMetadataFile = ".metadata";

// What the state dict's documents need alive: the archives of the non-tensor values, and the key
// nodes made for them.
struct dcp_objects {
  std::vector<torch_archive> archives;
  pickle_document keys;
};

std::string short_value(const pickle_node& n) {
  switch (n.kind) {
    case pickle_kind::boolean: return n.bool_value ? "True" : "False";
    case pickle_kind::integer: return std::to_string(n.int_value);
    case pickle_kind::string: return n.text.size() <= 200 ? n.text : n.text.substr(0, 200) + "...";
    default: return {};
  }
}

// Whether a tensor or a storage lies anywhere in `root` (object keys aside).
bool holds_tensors(const pickle_node* root) {
  bool found = false;
  walk_pickle(root,
              [&](const pickle_node& n, const pickle_place&) {
                found = n.kind == pickle_kind::tensor || n.kind == pickle_kind::storage;
                return found ? pickle_visit::stop : pickle_visit::enter;
              },
              {-1, false});
  return found;
}

class dcp_reader {
 public:
  explicit dcp_reader(std::string folder) : folder_(std::move(folder)) {}

  // The torch.save archive at `s`, with `what` naming it in messages.
  torch_archive archive(const dcp_storage& s, const std::string& what) {
    auto& file = files_[s.relative_path];
    if (!file) file = mapped_file::open(path_in_folder(folder_, s.relative_path));
    const std::string& path = file->path();
    if (!range_inside(s.offset, s.length, file->size())) {
      const auto end = checked_add(s.offset, s.length);
      throw input_error(fmt::format("{}: {}: bytes {} to {} lie past the end of the file ({} bytes)", path, what,
                                    s.offset, end ? std::to_string(*end) : std::string("2^64 and more"), file->size()));
    }
    const std::string context = fmt::format("{}: {} (bytes {}+{})", path, what, s.offset, s.length);
    auto zip = std::make_unique<zip_reader>(file->data() + s.offset, s.length, context);
    return open_torch_archive(file, std::move(zip), context, "a torch.save chunk");
  }

  tensor_view chunk(const dcp_entry& e, size_t i) {
    const dcp_chunk& c = e.chunks[i];
    const std::string what = fmt::format("tensor '{}' chunk {} (offsets {}, sizes {})", e.fqn, i,
                                         shape_string(c.offsets), shape_string(c.sizes));
    torch_archive a = archive(c.storage, what);
    const std::string& path = a.file->path();
    const pickle_node* root = a.doc->root();
    if (!root || root->kind != pickle_kind::tensor)
      throw input_error(fmt::format("{}: {}: holds a {}, expected the chunk's tensor", path, what,
                                    root ? pickle_type_name(*root) : "nothing"));
    torch_storage_reader reader = archive_storages(a);
    tensor_view v = reader.view_of(what, *root->tensor);
    if (v.type != e.type)
      throw input_error(fmt::format("{}: {}: holds {}, but .metadata declares {}", path, what, dtype_name(v.type),
                                    dtype_name(e.type)));
    if (v.shape != c.sizes)
      throw input_error(fmt::format("{}: {}: holds a tensor of shape {}, but .metadata declares sizes {}", path, what,
                                    shape_string(v.shape), shape_string(c.sizes)));
    v.storage_key = fmt::format("{}@{}/{}", c.storage.relative_path, c.storage.offset, v.storage_key);
    // The archive's headers were read: their pages (and those mapped around them) go, or every
    // chunk of the model would keep some mapped until the fold reaches it.
    a.file->release_pages(c.storage.offset, c.storage.offset + c.storage.length);
    return v;
  }

  tensor_view tensor(const dcp_entry& e) {
    uint64_t numel = 1;
    for (int64_t d : e.size) numel *= static_cast<uint64_t>(d);  // checked by check_chunk_tiling
    if (numel == 0) {
      static const uint8_t kNothing = 0;
      tensor_view v;
      v.type = e.type;
      v.shape = e.size;
      v.strides = contiguous_strides(e.size);
      v.storage = &kNothing;
      v.storage_key = "dcp:" + e.fqn;
      return v;
    }
    size_t whole = e.chunks.size();
    for (size_t i = 0; i < e.chunks.size(); ++i)
      if (e.chunks[i].sizes == e.size) whole = i;
    if (whole < e.chunks.size()) return chunk(e, whole);  // the tiling check leaves the others empty

    // Several chunks: a pieced view, assembled only when the fold reads it.
    std::vector<tensor_piece> pieces;
    for (size_t i = 0; i < e.chunks.size(); ++i) {
      const dcp_chunk& c = e.chunks[i];
      bool empty = false;
      for (int64_t s : c.sizes) empty = empty || s == 0;
      if (empty) continue;
      tensor_piece p{chunk(e, i), c.offsets, false};
      const std::string wrong = check_piece(e.type, e.size, p);
      if (!wrong.empty())
        throw input_error(fmt::format("{}: tensor '{}' of size {}: chunk {} (offsets {}, sizes {}) {}", folder_, e.fqn,
                                      shape_string(e.size), i, shape_string(c.offsets), shape_string(c.sizes), wrong));
      pieces.push_back(std::move(p));
    }
    return make_pieced_view(e.type, e.size, std::move(pieces), "dcp:" + e.fqn);
  }

  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& [name, f] : files_) out.push_back(f->path());
    return out;
  }

 private:
  std::string folder_;
  std::map<std::string, std::shared_ptr<const mapped_file>> files_;
};

dcp_metadata read_metadata(const std::string& folder) {
  auto f = mapped_file::open(path_in_folder(folder, kMetadataFile));
  dcp_metadata md = parse_dcp_metadata(f->data(), f->size(), f->path());
  f->release_pages();
  return md;
}

std::string top_level(const dcp_entry& e) { return e.path.empty() ? e.fqn.substr(0, e.fqn.find('.')) : e.path[0].text; }

// The entries taken and their names in the state dict; `chosen` is the key taken ("" for all).
std::vector<std::pair<const dcp_entry*, std::string>> select(const dcp_metadata& md, const std::string& folder,
                                                             const std::string& key, std::string& chosen) {
  std::vector<std::pair<const dcp_entry*, std::string>> out;
  auto under = [&](const std::string& k) {
    out.clear();
    const std::string prefix = k + ".";
    bool tensors = false;
    for (const auto& e : md.entries)
      if (e.fqn.compare(0, prefix.size(), prefix) == 0) {
        out.emplace_back(&e, e.fqn.substr(prefix.size()));
        tensors = tensors || e.is_tensor;
      }
    return tensors;
  };
  if (!key.empty()) {
    if (!under(key)) {
      std::vector<std::string> tops;
      std::unordered_set<std::string> seen;
      for (const auto& e : md.entries)
        if (seen.insert(top_level(e)).second) tops.push_back(top_level(e));
      throw usage_error(
          fmt::format("{}: --key '{}': no tensor under '{}.' in this DCP checkpoint; entries at the top "
                      "level: {}",
                      folder, key, key, quoted_list(tops)));
    }
    chosen = key;
    return out;
  }
  bool nested = false;
  for (const auto& e : md.entries) nested = nested || e.path.size() > 1;
  if (nested)
    for (const auto& k : kStateDictKeys) {
      bool present = false;
      for (const auto& e : md.entries)
        present = present || (e.path.size() > 1 && !e.path[0].integer && e.path[0].text == k);
      if (present && under(k)) {
        chosen = k;
        return out;
      }
    }
  out.clear();
  for (const auto& e : md.entries) out.emplace_back(&e, e.fqn);
  return out;
}

}  // namespace

bool is_dcp_folder(const std::string& path) {
  struct stat st {};
  return is_folder(path) && ::stat(path_in_folder(path, kMetadataFile).c_str(), &st) == 0;
}

state_dict read_dcp_folder(const std::string& folder, const std::string& key) {
  const dcp_metadata md = read_metadata(folder);
  state_dict sd;
  sd.path = folder;
  sd.format = file_format::torch;
  sd.metadata = md.swavg;
  const auto taken = select(md, folder, key, sd.key);
  if (!sd.key.empty()) spdlog::debug("{}: took the entries under '{}'", folder, sd.key);
  dcp_reader reader(folder);
  auto objects = std::make_shared<dcp_objects>();
  std::unordered_set<std::string> names;
  for (const auto& [e, name] : taken) {
    if (!names.insert(name).second)
      throw input_error(fmt::format("{}: two entries are named '{}' once '{}.' is removed", folder, name, sd.key));
    if (e->is_tensor) {
      sd.tensors.push_back(named_tensor{name, reader.tensor(*e), tensor_kind::unknown});
      continue;
    }
    torch_archive a = reader.archive(e->storage, fmt::format("non-tensor entry '{}'", e->fqn));
    const pickle_node* value = a.doc->root();
    const std::string type = value ? pickle_type_name(*value) : "None";
    sd.others.push_back(other_entry{name, type, value ? short_value(*value) : ""});
    if (holds_tensors(value)) {
      spdlog::info("{}: non-tensor entry '{}' holds tensors inside a {}; not carried into outputs", folder, e->fqn,
                   type);
      continue;
    }
    pickle_node* k = objects->keys.make(pickle_kind::string);
    k->text = name;
    sd.objects.push_back(object_entry{name, type, k, value, a.file->path()});
    objects->archives.push_back(std::move(a));
  }
  if (!sd.objects.empty()) sd.document = std::shared_ptr<const pickle_document>(objects, &objects->keys);
  return sd;
}

std::vector<std::string> dcp_files(const std::string& folder) {
  const dcp_metadata md = read_metadata(folder);
  std::vector<std::string> out{path_in_folder(folder, kMetadataFile)};
  std::unordered_set<std::string> seen;
  auto add = [&](const dcp_storage& s) {
    if (seen.insert(s.relative_path).second) out.push_back(path_in_folder(folder, s.relative_path));
  };
  for (const auto& e : md.entries) {
    if (!e.is_tensor) add(e.storage);
    for (const auto& c : e.chunks) add(c.storage);
  }
  return out;
}

}  // namespace swavg
