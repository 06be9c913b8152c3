#include "formats/dcp/dcp_metadata.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "formats/pickle/pickle.h"
#include "formats/pickle/pickle_query.h"
#include "formats/pickle/unpickler.h"
#include "tensor/tensor_view.h"
#include "util/atomic_dir.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/text.h"

namespace swavg {
namespace {

constexpr const char* kMetadataModule = "torch.distributed.checkpoint.metadata.";
constexpr const char* kShardModule =
    "torch.distributed._shard.sharded_tensor.metadata.";  // torch 2.0's TensorProperties
constexpr const char* kStorageInfo = "torch.distributed.checkpoint.filesystem._StorageInfo";
constexpr const char* kMemFormat = "torch.distributed.checkpoint.metadata._MEM_FORMAT_ENCODING";

// The torch globals a TensorProperties may name: dtypes (swavg reads some of them; the others are
// refused by name later) and layouts.
constexpr const char* kTorchValues[] = {"float32",         "float64",
                                        "float16",         "bfloat16",
                                        "int64",           "int32",
                                        "int16",           "int8",
                                        "uint8",           "bool",
                                        "complex64",       "complex128",
                                        "complex32",       "uint16",
                                        "uint32",          "uint64",
                                        "float8_e4m3fn",   "float8_e5m2",
                                        "float8_e4m3fnuz", "float8_e5m2fnuz",
                                        "float8_e8m0fnu",  "float4_e2m1fn_x2",
                                        "qint8",           "quint8",
                                        "qint32",          "quint4x2",
                                        "quint2x4",        "strided",
                                        "sparse_coo",      "sparse_csr",
                                        "sparse_csc",      "sparse_bsr",
                                        "sparse_bsc",      "_mkldnn",
                                        "jagged"};

constexpr const char* kClasses[] = {"Metadata",         "TensorStorageMetadata", "ChunkStorageMetadata",
                                    "TensorProperties", "BytesStorageMetadata",  "MetadataIndex",
                                    "StorageMeta",      "_MEM_FORMAT_ENCODING"};

constexpr const char* kOtherGlobals[] = {
    kStorageInfo,        "torch.Size",          "torch.serialization._get_layout", "builtins.getattr",
    "pathlib.PosixPath", "pathlib.WindowsPath", "pathlib.PurePosixPath",           "pathlib.PureWindowsPath"};

bool allowed_global(const std::string& name) {
  for (const char* c : kClasses)
    if (name == std::string(kMetadataModule) + c) return true;
  if (name == std::string(kShardModule) + "TensorProperties" ||
      name == std::string(kShardModule) + "MEM_FORMAT_ENCODING")
    return true;
  for (const char* g : kOtherGlobals)
    if (name == g) return true;
  if (starts_with(name, "torch."))
    for (const char* v : kTorchValues)
      if (name.size() == 6 + std::strlen(v) && name.compare(6, std::string::npos, v) == 0) return true;
  return false;
}

bool is_mem_format_class(const pickle_node* n) {
  return n && n->kind == pickle_kind::global &&
         (n->text == kMemFormat || n->text == std::string(kShardModule) + "MEM_FORMAT_ENCODING");
}

// Every global the pickle names must be on the allow list, whether the root reaches it or not (a
// call whose result was popped would still run under pickle.load), and the two calls DCP's own
// pickles make (getattr on the memory-format enum, _get_layout on a layout name) only so.
void check_globals(const pickle_document& doc, const std::string& path) {
  auto refuse = [&](const std::string& name, const std::string& why) {
    throw input_error(
        fmt::format("{}: refers to '{}', {}; a DCP .metadata holds only torch.distributed.checkpoint's metadata "
                    "classes, torch.Size and torch dtypes (nothing was run)",
                    path, name, why));
  };
  for (const std::string& name : doc.named_globals())
    if (!allowed_global(name)) refuse(name, "which is not on the allow list");
  for (const auto& node : doc.nodes()) {
    const pickle_node* n = node.get();
    switch (n->kind) {
      case pickle_kind::opaque:
        if (!allowed_global(n->text)) refuse(n->text, "which is not on the allow list");
        if (n->text == "builtins.getattr" &&
            !(n->call && n->call->args.size() == 2 && is_mem_format_class(n->call->args[0]) &&
              n->call->args[1]->kind == pickle_kind::string))
          refuse(n->text, "called on something other than _MEM_FORMAT_ENCODING");
        if (n->text == "torch.serialization._get_layout" &&
            !(n->call && n->call->args.size() == 1 && n->call->args[0]->kind == pickle_kind::string &&
              starts_with(n->call->args[0]->text, "torch.") && allowed_global(n->call->args[0]->text)))
          refuse(n->text, "called on something other than a layout name");
        break;
      case pickle_kind::tensor:
      case pickle_kind::storage: refuse("a tensor", "which a .metadata never holds"); break;
      default: break;
    }
  }
}

class reader {
 public:
  explicit reader(const std::string& path) : path_(path) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw input_error(fmt::format("{}: {}: {}", path_, where, what));
  }

  static std::string type_of(const pickle_node* n) { return n ? pickle_type_name(*n) : "nothing"; }

  static bool is_instance(const pickle_node* n, const char* cls) {
    if (!n || n->kind != pickle_kind::opaque) return false;
    return n->text == std::string(kMetadataModule) + cls ||
           (std::strcmp(cls, "TensorProperties") == 0 && n->text == std::string(kShardModule) + cls);
  }

  const pickle_node* instance(const pickle_node* n, const char* cls, const std::string& where) const {
    if (!is_instance(n, cls)) fail(where, fmt::format("expected a {}, found {}", cls, type_of(n)));
    return n;
  }

  // A dataclass field: its BUILD state's entry, or nullptr when absent (the class default).
  static const pickle_node* field(const pickle_node* obj, std::string_view name) {
    return obj && obj->call ? find_entry(obj->call->state, name) : nullptr;
  }

  const pickle_node* required(const pickle_node* obj, const char* name, const std::string& where) const {
    const pickle_node* v = field(obj, name);
    if (!v) fail(where, fmt::format("no '{}' field", name));
    return v;
  }

  const std::string& text(const pickle_node* n, const std::string& where) const {
    if (!n || n->kind != pickle_kind::string) fail(where, fmt::format("expected a str, found {}", type_of(n)));
    return n->text;
  }

  uint64_t count(const pickle_node* n, const std::string& where) const {
    if (!n || n->kind != pickle_kind::integer || n->int_value < 0)
      fail(where, fmt::format("expected a non-negative int, found {}",
                              n && n->kind == pickle_kind::integer ? std::to_string(n->int_value) : type_of(n)));
    return static_cast<uint64_t>(n->int_value);
  }

  // torch.Size((...)) or a plain tuple of non-negative ints.
  std::vector<int64_t> dims(const pickle_node* n, const std::string& where) const {
    const pickle_node* t = n;
    if (n && n->kind == pickle_kind::opaque && n->text == "torch.Size" && n->call && !n->call->constructed) {
      if (n->call->args.size() != 1) fail(where, "torch.Size takes one tuple");
      t = n->call->args[0];
    }
    if (!is_sequence(t)) fail(where, fmt::format("expected a torch.Size, found {}", type_of(n)));
    std::vector<int64_t> out;
    for (const pickle_node* d : t->items) out.push_back(static_cast<int64_t>(count(d, where)));
    return out;
  }

  dtype dtype_of(const pickle_node* props, const std::string& where) const {
    const pickle_node* state = props->call ? props->call->state : nullptr;
    const pickle_node* d = nullptr;
    if (state && state->kind == pickle_kind::tuple && !state->items.empty())
      d = state->items[0];  // TensorProperties.__getstate__: (dtype, layout, requires_grad, memory_format, pin_memory)
    else
      d = field(props, "dtype");
    if (!d || d->kind != pickle_kind::global || !starts_with(d->text, "torch."))
      fail(where, fmt::format("TensorProperties holds no torch dtype (found {})", type_of(d)));
    const std::optional<dtype> t = dtype_from_name(std::string_view(d->text).substr(6));
    if (!t) fail(where, fmt::format("dtype {} is not one swavg reads", d->text));
    return *t;
  }

  dcp_storage storage(const pickle_node* info, const std::string& where) const {
    if (!info || info->kind != pickle_kind::opaque || info->text != kStorageInfo)
      fail(where, fmt::format("expected a _StorageInfo, found {}", type_of(info)));
    dcp_storage s;
    s.relative_path = text(required(info, "relative_path", where), where + ": relative_path");
    const std::string& p = s.relative_path;
    if (p.empty() || p == "." || p == ".." || p.find('/') != std::string::npos || p.find('\\') != std::string::npos ||
        p.find('\0') != std::string::npos)
      fail(where, fmt::format("relative_path '{}' is not a file name inside the checkpoint folder", p));
    s.offset = count(required(info, "offset", where), where + ": offset");
    s.length = count(required(info, "length", where), where + ": length");
    if (const pickle_node* t = field(info, "transform_descriptors")) {
      const bool none = t->kind == pickle_kind::none || (is_sequence(t) && t->items.empty());
      if (!none)
        fail(where,
             "the chunk was written through storage extensions (transform_descriptors, e.g. compression); "
             "swavg reads plain torch.save chunks only");
    }
    return s;
  }

 private:
  const std::string& path_;
};

std::string storage_key(const std::string& fqn, const std::vector<int64_t>* offsets) {
  std::string k = fqn;
  k += '\0';
  if (offsets)
    for (int64_t o : *offsets) k += std::to_string(o) + ',';
  else
    k += "none";
  return k;
}

}  // namespace

namespace {

std::string chunk_name(size_t i, const dcp_chunk& c) {
  return fmt::format("chunk {} (offsets {}, sizes {})", i, shape_string(c.offsets), shape_string(c.sizes));
}

// Dimensions where chunk `c` ends before the tensor does: the only ones where its far corner lies
// inside the tensor.
size_t split_dims(const dcp_chunk& c, const std::vector<int64_t>& size) {
  size_t k = 0;
  for (size_t d = 0; d < size.size(); ++d) k += c.offsets[d] + c.sizes[d] < size[d];
  return k;
}

// A corner of a chunk inside the tensor: the chunk's offsets, moved to its far side in the split
// dimensions whose bit is set in `far`.
struct corner {
  size_t chunk;
  uint64_t far;
};

int64_t corner_at(const corner& c, size_t d, const std::vector<dcp_chunk>& chunks, const std::vector<int64_t>& size,
                  size_t& bit) {
  const dcp_chunk& ch = chunks[c.chunk];
  const int64_t end = ch.offsets[d] + ch.sizes[d];
  if (end >= size[d]) return ch.offsets[d];
  return (c.far >> bit++) & 1 ? end : ch.offsets[d];
}

// The chunks inside the tensor tile it exactly iff the sum of their indicator functions is the
// tensor's. Written as signed orthants {p >= v} at each chunk's corners v (+ for an even number of
// far sides), that sum is unique, and orthants at a corner outside the tensor vanish inside it: the
// chunks tile iff the signed corners cancel everywhere but at the origin, which is left +1. Sorting
// the corners costs O(C log C) for C = sum over chunks of 2^(split dims), whatever the layout.
bool corners_cancel(const std::vector<int64_t>& size, const std::vector<dcp_chunk>& chunks,
                    const std::vector<size_t>& nonempty, uint64_t count) {
  std::vector<corner> all;
  all.reserve(count);
  for (size_t i : nonempty)
    for (uint64_t far = 0, n = uint64_t{1} << split_dims(chunks[i], size); far < n; ++far) all.push_back({i, far});
  auto less = [&](const corner& a, const corner& b) {
    size_t ba = 0, bb = 0;
    for (size_t d = 0; d < size.size(); ++d) {
      const int64_t x = corner_at(a, d, chunks, size, ba), y = corner_at(b, d, chunks, size, bb);
      if (x != y) return x < y;
    }
    return false;
  };
  std::sort(all.begin(), all.end(), less);
  bool origin_seen = all.empty();  // no corners: an empty tensor
  for (size_t i = 0; i < all.size();) {
    int64_t sum = 0;
    size_t j = i;
    for (; j < all.size() && !less(all[i], all[j]); ++j) sum += __builtin_popcountll(all[j].far) % 2 ? -1 : 1;
    size_t bit = 0;
    bool origin = true;
    for (size_t d = 0; d < size.size() && origin; ++d) origin = corner_at(all[i], d, chunks, size, bit) == 0;
    if (sum != (origin ? 1 : 0)) return false;
    origin_seen = origin_seen || origin;
    i = j;
  }
  return origin_seen;
}

bool chunks_meet(const dcp_chunk& a, const dcp_chunk& b) {
  for (size_t d = 0; d < a.offsets.size(); ++d)
    if (!(b.offsets[d] < a.offsets[d] + a.sizes[d] && a.offsets[d] < b.offsets[d] + b.sizes[d])) return false;
  return true;
}

// Names two chunks that overlap (some do): swept along the dimension where the chunks start at the
// most places, at most kMaxOverlapPairs pairs compared, so that a hostile layout costs bounded time
// here too (past it, the message names no pair).
constexpr uint64_t kMaxOverlapPairs = uint64_t{1} << 22;

size_t sweep_dim(const std::vector<dcp_chunk>& chunks, const std::vector<size_t>& nonempty, size_t nd) {
  size_t best = 0, most = 0;
  std::vector<int64_t> starts;
  for (size_t d = 0; d < nd; ++d) {
    starts.clear();
    for (size_t i : nonempty) starts.push_back(chunks[i].offsets[d]);
    std::sort(starts.begin(), starts.end());
    const auto distinct = static_cast<size_t>(std::unique(starts.begin(), starts.end()) - starts.begin());
    if (distinct > most) best = d, most = distinct;
  }
  return best;
}

std::string overlap_message(const std::vector<dcp_chunk>& chunks, std::vector<size_t> nonempty, uint64_t covered,
                            uint64_t numel) {
  const size_t d = sweep_dim(chunks, nonempty, chunks[nonempty[0]].offsets.size());
  std::sort(nonempty.begin(), nonempty.end(),
            [&](size_t a, size_t b) { return chunks[a].offsets[d] < chunks[b].offsets[d]; });
  uint64_t compared = 0;
  for (size_t x = 0; x < nonempty.size(); ++x) {
    const dcp_chunk& a = chunks[nonempty[x]];
    for (size_t y = x + 1; y < nonempty.size() && compared < kMaxOverlapPairs; ++y, ++compared) {
      const dcp_chunk& b = chunks[nonempty[y]];
      if (b.offsets[d] >= a.offsets[d] + a.sizes[d]) break;
      if (chunks_meet(a, b)) {
        const size_t i = std::min(nonempty[x], nonempty[y]), j = std::max(nonempty[x], nonempty[y]);
        return fmt::format("{} overlaps {}", chunk_name(j, chunks[j]), chunk_name(i, chunks[i]));
      }
    }
  }
  return fmt::format("the chunks overlap: they hold {} elements in all, but do not cover each of the {} once", covered,
                     numel);
}

}  // namespace

uint64_t tiling_corner_limit(size_t chunks) { return std::max<uint64_t>(kMinTilingCorners, 16 * uint64_t{chunks}); }

std::string check_chunk_tiling(const std::vector<int64_t>& size, const std::vector<dcp_chunk>& chunks,
                               uint64_t corner_limit) {
  const size_t nd = size.size();
  uint64_t numel = 1;
  for (int64_t d : size) {
    auto m = checked_mul(numel, static_cast<uint64_t>(d));
    if (!m) return fmt::format("size {} has more than 2^64 elements", shape_string(size));
    numel = *m;
  }
  uint64_t covered = 0, corners = 0;
  std::vector<size_t> nonempty;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const dcp_chunk& c = chunks[i];
    if (c.offsets.size() != nd || c.sizes.size() != nd)
      return fmt::format("{} has {} dimensions, the tensor {}", chunk_name(i, c),
                         std::max(c.offsets.size(), c.sizes.size()), nd);
    uint64_t n = 1;
    for (size_t d = 0; d < nd; ++d) {
      if (c.offsets[d] < 0 || c.sizes[d] < 0) return fmt::format("{} has a negative offset or size", chunk_name(i, c));
      const uint64_t end = static_cast<uint64_t>(c.offsets[d]) + static_cast<uint64_t>(c.sizes[d]);
      if (end > static_cast<uint64_t>(size[d]))
        return fmt::format("{} ends at {} in dimension {}, past the tensor's size {}", chunk_name(i, c), end, d,
                           size[d]);
      n *= static_cast<uint64_t>(c.sizes[d]);  // bounded by numel: inside the tensor
    }
    auto sum = checked_add(covered, n);
    if (!sum) return "the chunks hold more than 2^64 elements";
    covered = *sum;
    if (!n) continue;
    nonempty.push_back(i);
    const size_t k = split_dims(c, size);
    const auto more = k < 63 ? checked_add(corners, uint64_t{1} << k) : std::nullopt;
    corners = more ? *more : UINT64_MAX;
  }
  if (covered < numel)
    return fmt::format("the chunks cover {} of the {} elements of size {}: a chunk is missing", covered, numel,
                       shape_string(size));
  if (nd == 0) {
    if (nonempty.size() > 1)
      return fmt::format("{} overlaps {}", chunk_name(nonempty[1], chunks[nonempty[1]]),
                         chunk_name(nonempty[0], chunks[nonempty[0]]));
    return "";
  }
  if (covered > numel) return overlap_message(chunks, nonempty, covered, numel);
  const uint64_t limit = corner_limit ? corner_limit : tiling_corner_limit(nonempty.size());
  if (corners > limit)
    return fmt::format(
        "its {} chunks are cut along so many dimensions that checking that they tile the tensor takes {} corners, "
        "more than the {} swavg checks for so many chunks",
        nonempty.size(), corners, limit);
  if (!corners_cancel(size, chunks, nonempty, corners)) return overlap_message(chunks, nonempty, covered, numel);
  return "";
}

namespace {

using dcp_stored = std::map<std::string, dcp_storage>;  // storage_key -> where its bytes are

// Metadata.storage_data: MetadataIndex -> _StorageInfo.
dcp_stored read_storage_data(const reader& r, const pickle_node* root) {
  dcp_stored stored;
  const pickle_node* sdata = reader::field(root, "storage_data");
  if (!sdata || sdata->kind != pickle_kind::dict)
    r.fail("storage_data", fmt::format("expected a dict of _StorageInfo, found {}", reader::type_of(sdata)));
  for (const auto& [k, v] : sdata->entries) {
    r.instance(k, "MetadataIndex", "a storage_data key");
    const std::string& fqn = r.text(r.required(k, "fqn", "a storage_data key"), "a storage_data key's fqn");
    const pickle_node* off = reader::field(k, "offset");
    const std::string where = fmt::format("storage_data['{}']", fqn);
    std::optional<std::vector<int64_t>> offsets;
    if (off && off->kind != pickle_kind::none) offsets = r.dims(off, where + ": offset");
    const std::string key = storage_key(fqn, offsets ? &*offsets : nullptr);
    if (!stored.emplace(key, r.storage(v, where)).second)
      r.fail(where, fmt::format("the chunk at offsets {} is listed twice", offsets ? shape_string(*offsets) : "none"));
  }
  return stored;
}

// Metadata.planner_data: fqn -> the path of keys in the nested state dict (DefaultSavePlanner's
// flattening). Optional: entries of other shapes are passed over.
std::map<std::string, std::vector<dcp_path_part>> read_planner_data(const reader& r, const pickle_node* root) {
  std::map<std::string, std::vector<dcp_path_part>> paths;
  const pickle_node* pd = reader::field(root, "planner_data");
  if (!pd || pd->kind != pickle_kind::dict) return paths;
  for (const auto& [k, v] : pd->entries) {
    if (!k || k->kind != pickle_kind::string || !is_sequence(v)) continue;
    std::vector<dcp_path_part> p;
    for (const pickle_node* c : v->items) {
      if (c->kind == pickle_kind::string)
        p.push_back(dcp_path_part{c->text, false});
      else if (c->kind == pickle_kind::integer)
        p.push_back(dcp_path_part{std::to_string(c->int_value), true, c->int_value});
      else
        r.fail(fmt::format("planner_data['{}']", k->text), "a path element that is neither str nor int");
    }
    paths[k->text] = std::move(p);
  }
  return paths;
}

// The field swavg adds to Metadata: a dict of str.
std::map<std::string, std::string> read_swavg_field(const reader& r, const pickle_node* root) {
  std::map<std::string, std::string> out;
  const pickle_node* extra = reader::field(root, kDcpSwavgField);
  if (!extra) return out;
  if (extra->kind != pickle_kind::dict) r.fail(kDcpSwavgField, "expected a dict of str");
  for (const auto& [k, v] : extra->entries)
    out[r.text(k, std::string(kDcpSwavgField) + " key")] = r.text(v, std::string(kDcpSwavgField) + " value");
  return out;
}

// A TensorStorageMetadata into `e`: dtype, size, and its chunks with their storage, checked to tile it.
void read_tensor_entry(const reader& r, const pickle_node* v, const dcp_stored& stored, const std::string& where,
                       dcp_entry& e) {
  r.instance(v, "TensorStorageMetadata", where);
  e.is_tensor = true;
  const pickle_node* props = r.instance(r.required(v, "properties", where), "TensorProperties", where);
  e.type = r.dtype_of(props, where);
  e.size = r.dims(r.required(v, "size", where), where + ": size");
  const pickle_node* chunks = r.required(v, "chunks", where);
  if (!is_sequence(chunks)) r.fail(where, fmt::format("chunks: expected a list, found {}", reader::type_of(chunks)));
  for (size_t i = 0; i < chunks->items.size(); ++i) {
    const std::string cw = fmt::format("{}: chunk {}", where, i);
    const pickle_node* c = r.instance(chunks->items[i], "ChunkStorageMetadata", cw);
    dcp_chunk chunk;
    chunk.offsets = r.dims(r.required(c, "offsets", cw), cw + ": offsets");
    chunk.sizes = r.dims(r.required(c, "sizes", cw), cw + ": sizes");
    auto it = stored.find(storage_key(e.fqn, &chunk.offsets));
    if (it == stored.end())
      r.fail(cw, fmt::format("no storage_data entry for the chunk at offsets {}", shape_string(chunk.offsets)));
    chunk.storage = it->second;
    e.chunks.push_back(std::move(chunk));
  }
  const std::string tiling = check_chunk_tiling(e.size, e.chunks);
  if (!tiling.empty()) r.fail(where, tiling);
}

// Metadata.state_dict_metadata: fqn -> TensorStorageMetadata or BytesStorageMetadata, in order.
std::vector<dcp_entry> read_state_dict_metadata(const reader& r, const pickle_node* root, const dcp_stored& stored,
                                                const std::map<std::string, std::vector<dcp_path_part>>& paths) {
  const pickle_node* sdm = reader::field(root, "state_dict_metadata");
  if (!sdm || sdm->kind != pickle_kind::dict)
    r.fail("state_dict_metadata", fmt::format("expected a dict, found {}", reader::type_of(sdm)));
  std::vector<dcp_entry> entries;
  std::unordered_set<std::string> names;
  for (const auto& [k, v] : sdm->entries) {
    dcp_entry e;
    e.fqn = r.text(k, "a state_dict_metadata key");
    if (!names.insert(e.fqn).second) r.fail(fmt::format("'{}'", e.fqn), "listed twice");
    const std::string where = fmt::format("'{}'", e.fqn);
    if (auto it = paths.find(e.fqn); it != paths.end()) e.path = it->second;
    if (reader::is_instance(v, "BytesStorageMetadata")) {
      auto it = stored.find(storage_key(e.fqn, nullptr));
      if (it == stored.end()) r.fail(where, "a non-tensor entry without a storage_data entry");
      e.storage = it->second;
    } else {
      read_tensor_entry(r, v, stored, where, e);
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

}  // namespace

dcp_metadata parse_dcp_metadata(const uint8_t* data, size_t size, const std::string& path) {
  const std::unique_ptr<pickle_document> doc = unpickle(data, size, path);
  const pickle_node* root = doc->root();
  check_globals(*doc, path);
  reader r(path);
  r.instance(root, "Metadata", "the top level");
  const dcp_stored stored = read_storage_data(r, root);
  const auto paths = read_planner_data(r, root);
  dcp_metadata md;
  if (const pickle_node* v = reader::field(root, "version"); v && v->kind == pickle_kind::string) md.version = v->text;
  md.swavg = read_swavg_field(r, root);
  md.entries = read_state_dict_metadata(r, root, stored, paths);
  return md;
}

dcp_metadata read_dcp_metadata(const std::string& folder) {
  const auto f = mapped_file::open(without_trailing_slash(folder) + "/.metadata");
  return parse_dcp_metadata(f->data(), f->size(), f->path());
}

}  // namespace swavg
