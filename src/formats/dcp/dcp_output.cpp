/*
 * DCP output (dcp_output.h): the layout planned up front, `.metadata` pickled as torch 2.14 pickles
 * it, and the rank files streamed chunk archive by chunk archive.
 */
#include "formats/dcp/dcp_output.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <unordered_map>

#include "formats/dcp/dcp_input.h"
#include "formats/pickle/pickle_emitter.h"
#include "formats/pickle/pickle_opcodes.h"
#include "formats/zip/zip_writer.h"
#include "tensor/tensor_view.h"
#include "util/atomic_dir.h"
#include "util/atomic_file.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/sha256.h"
#include "util/surrogate_escape.h"

namespace swavg {
namespace {

using namespace pickle_op;

constexpr const char* kMetadataModule = "torch.distributed.checkpoint.metadata";
constexpr const char* kFilesystemModule = "torch.distributed.checkpoint.filesystem";
constexpr const char* kDcpVersion = "1.0.0";  // torch 2.14's CURRENT_DCP_VERSION
constexpr const char* kDataRecord = "archive/data/0";
constexpr const char* kPickleRecord = "archive/data.pkl";
constexpr const char* kByteorderRecord = "archive/byteorder";
constexpr const char* kVersionRecord = "archive/version";
constexpr const char* kFormatVersion = "3\n";

// pickle_emitter with the shapes DCP's dataclasses take.
class pickler : public pickle_emitter {
 public:
  void str(const std::string& s) { string(surrogate_escaped(s)); }  // as torch pickles os.fsdecode(name)
  void ints(const std::vector<int64_t>& values) { int_tuple(values); }
  // cls.__new__(cls) of a class of `module`, then its state as a dict: begin, the items, end.
  void object_begin(const std::string& module, const std::string& cls) {
    global(module, cls);
    plain(kEmptyTuple);
    plain(kNewObj);
    plain(kEmptyDict);
    plain(kMark);
  }
  void object_end() {
    plain(kSetItems);
    plain(kBuild);
  }
  void size(const std::vector<int64_t>& dims) {  // torch.Size(dims)
    global("torch", "Size");
    ints(dims);
    plain(kTuple1);
    plain(kReduce);
  }
};

uint64_t numel_of(const std::vector<int64_t>& sizes) {
  uint64_t n = 1;
  for (int64_t d : sizes) n *= static_cast<uint64_t>(d);
  return n;
}

uint64_t checked_sum(uint64_t a, uint64_t b, const std::string& what) {
  const auto s = checked_add(a, b);
  if (!s) throw input_error(fmt::format("{}: past 2^64 bytes", what));
  return *s;
}

// The linear index of `idx` in row-major order over `shape`, and back.
void unravel(uint64_t e, const std::vector<int64_t>& shape, std::vector<int64_t>& idx) {
  for (size_t d = shape.size(); d-- > 0;) {
    const auto n = static_cast<uint64_t>(shape[d]);
    idx[d] = static_cast<int64_t>(e % n);
    e /= n;
  }
}

bool chunk_holds(const dcp_out_chunk& c, const std::vector<int64_t>& idx) {
  for (size_t d = 0; d < idx.size(); ++d)
    if (idx[d] < c.offsets[d] || idx[d] >= c.offsets[d] + c.sizes[d]) return false;
  return true;
}

// Elements from `idx` on, in row-major order, that stay inside chunk `c` (which holds `idx`).
uint64_t run_in_chunk(const dcp_out_chunk& c, const std::vector<int64_t>& shape, const std::vector<int64_t>& idx,
                      uint64_t remaining) {
  int k = static_cast<int>(shape.size()) - 1;
  while (k >= 0 && c.sizes[k] == shape[k]) --k;
  if (k < 0) return remaining;
  uint64_t inner = 1, inner_offset = 0;
  for (size_t j = static_cast<size_t>(k) + 1; j < shape.size(); ++j) {
    inner_offset = inner_offset * static_cast<uint64_t>(shape[j]) + static_cast<uint64_t>(idx[j]);
    inner *= static_cast<uint64_t>(shape[j]);
  }
  return static_cast<uint64_t>(c.offsets[k] + c.sizes[k] - idx[k]) * inner - inner_offset;
}

std::string uuid_like(const std::string& hex) {
  return fmt::format("{}-{}-{}-{}-{}", hex.substr(0, 8), hex.substr(8, 4), hex.substr(12, 4), hex.substr(16, 4),
                     hex.substr(20, 12));
}

std::vector<std::string> path_parts(const std::string& path) {
  std::vector<std::string> parts;
  if (!path.empty() && path[0] == '/') parts.push_back("/");
  size_t start = 0;
  while (start <= path.size()) {
    const size_t slash = std::min(path.find('/', start), path.size());
    if (slash > start) parts.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return parts;
}

// TensorProperties(dtype, torch.strided, requires_grad=False, contiguous, pin_memory=False).
void pickle_tensor_properties(pickler& p, dtype type) {
  p.global(kMetadataModule, "TensorProperties");
  p.plain(kEmptyTuple);
  p.plain(kNewObj);
  p.plain(kMark);
  p.global("torch", dtype_name(type));
  p.global("torch.serialization", "_get_layout");
  p.str("torch.strided");
  p.plain(kTuple1);
  p.plain(kReduce);
  p.plain(kNewFalse);  // requires_grad
  p.global("builtins", "getattr");
  p.global(kMetadataModule, "_MEM_FORMAT_ENCODING");
  p.str("TORCH_CONTIGUOUS_FORMAT");
  p.plain(kTuple2);
  p.plain(kReduce);
  p.plain(kNewFalse);  // pin_memory
  p.plain(kTuple);
  p.plain(kBuild);
}

void pickle_tensor_metadata(pickler& p, const dcp_out_tensor& t) {
  p.object_begin(kMetadataModule, "TensorStorageMetadata");
  p.str("properties");
  pickle_tensor_properties(p, t.type);
  p.str("size");
  p.size(t.shape);
  p.str("chunks");
  p.plain(kEmptyList);
  p.plain(kMark);
  for (const auto& c : t.chunks) {
    p.object_begin(kMetadataModule, "ChunkStorageMetadata");
    p.str("offsets");
    p.size(c.offsets);
    p.str("sizes");
    p.size(c.sizes);
    p.object_end();
  }
  p.plain(kAppends);
  p.object_end();
}

// Metadata.state_dict_metadata: fqn -> TensorStorageMetadata.
void pickle_state_dict_metadata(pickler& p, const dcp_plan& plan) {
  p.str("state_dict_metadata");
  p.plain(kEmptyDict);
  p.plain(kMark);
  for (const auto& t : plan.tensors) {
    p.str(t.fqn);
    pickle_tensor_metadata(p, t);
  }
  p.plain(kSetItems);
}

// Metadata.planner_data: fqn -> the tensor's path in the state dict, a tuple of keys and indices.
void pickle_planner_data(pickler& p, const dcp_plan& plan) {
  p.str("planner_data");
  p.plain(kEmptyDict);
  p.plain(kMark);
  for (const auto& t : plan.tensors) {
    p.str(t.fqn);
    p.plain(kMark);
    for (const auto& part : t.path)
      if (part.integer)
        p.integer(part.value);
      else
        p.str(part.text);
    p.plain(kTuple);
  }
  p.plain(kSetItems);
}

// Metadata.storage_data: MetadataIndex -> _StorageInfo, grouped by file, in tensor and chunk order
// within each.
void pickle_storage_data(pickler& p, const dcp_plan& plan) {
  p.str("storage_data");
  p.plain(kEmptyDict);
  p.plain(kMark);
  std::vector<std::vector<std::pair<const dcp_out_tensor*, size_t>>> by_file(plan.files.size());
  for (const auto& t : plan.tensors)
    for (size_t i = 0; i < t.chunks.size(); ++i) by_file[t.chunks[i].file].emplace_back(&t, i);
  for (size_t f = 0; f < plan.files.size(); ++f)
    for (const auto& [tensor, i] : by_file[f]) {
      const dcp_out_tensor& t = *tensor;
      const dcp_out_chunk& c = t.chunks[i];
      p.object_begin(kMetadataModule, "MetadataIndex");
      p.str("fqn");
      p.str(t.fqn);
      p.str("offset");
      p.size(c.offsets);
      p.str("index");
      p.integer(static_cast<int64_t>(i));
      p.object_end();
      p.object_begin(kFilesystemModule, "_StorageInfo");
      p.str("relative_path");
      p.str(plan.files[f]);
      p.str("offset");
      p.integer(static_cast<int64_t>(c.offset));
      p.str("length");
      p.integer(static_cast<int64_t>(c.length));
      p.object_end();
    }
  p.plain(kSetItems);
}

// Metadata.storage_meta: StorageMeta(PosixPath(checkpoint_id), save_id, load_id=None, modules=[]).
void pickle_storage_meta(pickler& p, const std::string& checkpoint_id, const std::string& save_id) {
  p.str("storage_meta");
  p.object_begin(kMetadataModule, "StorageMeta");
  p.str("checkpoint_id");
  p.global("pathlib", "PosixPath");
  p.plain(kMark);
  for (const auto& part : path_parts(checkpoint_id)) p.str(part);
  p.plain(kTuple);
  p.plain(kReduce);
  p.str("save_id");
  p.str(save_id);
  p.str("load_id");
  p.plain(kNone);
  p.str("modules");
  p.plain(kEmptyList);
  p.object_end();
}

std::string metadata_pickle(const dcp_plan& plan, const std::string& checkpoint_id, const std::string& save_id,
                            const std::map<std::string, std::string>& swavg) {
  pickler p;
  p.proto();
  p.object_begin(kMetadataModule, "Metadata");
  pickle_state_dict_metadata(p, plan);
  pickle_planner_data(p, plan);
  pickle_storage_data(p, plan);
  pickle_storage_meta(p, checkpoint_id, save_id);
  if (!swavg.empty()) {
    p.str(kDcpSwavgField);
    p.plain(kEmptyDict);
    p.plain(kMark);
    for (const auto& [k, v] : swavg) {
      p.str(k);
      p.str(v);
    }
    p.plain(kSetItems);
  }
  p.str("version");
  p.str(kDcpVersion);
  p.object_end();
  p.plain(kStop);
  return p.bytes;
}

// The rank files of `like` whose names the output reserves (.metadata, swavg's job and temp files),
// each renamed to the first __<k>_0.distcp that no file of `like` and no earlier rename takes.
std::map<std::string, std::string> output_file_names(const dcp_chunk_source* like) {
  std::map<std::string, std::string> renamed;
  if (!like) return renamed;
  std::set<std::string> taken;
  for (const auto& e : like->metadata.entries)
    for (const auto& c : e.chunks) taken.insert(c.storage.relative_path);
  size_t next = 0;
  for (const auto& e : like->metadata.entries)
    for (const auto& c : e.chunks) {
      const std::string& name = c.storage.relative_path;
      if (!is_reserved_dcp_name(name) || renamed.count(name)) continue;
      std::string fresh;
      do fresh = fmt::format("__{}_0.distcp", next++);
      while (taken.count(fresh));
      taken.insert(fresh);
      renamed.emplace(name, fresh);
    }
  return renamed;
}

}  // namespace

bool is_reserved_dcp_name(const std::string& name) { return name == kDcpMetadataName || is_job_file_name(name); }

std::string dcp_chunk_pickle(dtype type, const std::vector<int64_t>& sizes) {
  // As torch.save: a typed storage and _rebuild_tensor_v2, or for the dtypes without a storage class
  // (uint16, float8, ...) an UntypedStorage of bytes, _rebuild_tensor_v3 and the dtype last.
  const bool v3 = needs_rebuild_v3(type);
  pickler p;
  p.proto();
  p.global("torch._utils", v3 ? "_rebuild_tensor_v3" : "_rebuild_tensor_v2");
  p.plain(kMark);
  p.plain(kMark);
  p.str("storage");
  if (v3)
    p.global("torch.storage", "UntypedStorage");
  else
    p.global("torch", storage_class_name(type));
  p.str("0");
  p.str("cpu");
  p.integer(static_cast<int64_t>(v3 ? numel_of(sizes) * itemsize(type) : numel_of(sizes)));
  p.plain(kTuple);
  p.plain(kBinPersId);
  p.integer(0);
  p.ints(sizes);
  p.ints(contiguous_strides(sizes));
  p.plain(kNewFalse);
  p.global("collections", "OrderedDict");
  p.plain(kEmptyTuple);
  p.plain(kReduce);
  if (v3) p.global("torch", dtype_name(type));
  p.plain(kTuple);
  p.plain(kReduce);
  p.plain(kStop);
  return p.bytes;
}

uint64_t dcp_chunk_archive_size(uint64_t nbytes, uint64_t pickle_size) {
  const auto size = zip_archive_size(
      {{kDataRecord, nbytes}, {kPickleRecord, pickle_size}, {kByteorderRecord, 6}, {kVersionRecord, 2}});
  if (!size) throw input_error("a DCP chunk archive: past 2^64 bytes");
  return *size;
}

dcp_plan plan_dcp(std::vector<tensor_spec> specs, const dcp_chunk_source* like, const std::string& checkpoint_id,
                  const std::map<std::string, std::string>& swavg) {
  dcp_plan plan;
  std::unordered_map<std::string, const dcp_entry*> entries;
  if (like)
    for (const auto& e : like->metadata.entries)
      if (e.is_tensor) entries.emplace(e.fqn, &e);
  std::map<std::string, size_t> file_index;
  std::vector<uint64_t> file_end;
  auto add_file = [&](const std::string& name) {
    auto [it, added] = file_index.emplace(name, plan.files.size());
    if (added) {
      plan.files.push_back(name);
      file_end.push_back(0);
    }
    return it->second;
  };
  const std::map<std::string, std::string> renamed = output_file_names(like);
  auto file_of = [&](const std::string& input_name) {
    const auto r = renamed.find(input_name);
    return add_file(r == renamed.end() ? input_name : r->second);
  };
  std::string identity = checkpoint_id;
  for (const auto& s : specs) {
    if (s.alias_of) throw error(exit_code::internal, fmt::format("DCP output: '{}' is an alias", s.name));
    const std::string fqn = like && !like->key.empty() ? like->key + "." + s.name : s.name;
    dcp_out_tensor t{fqn, {}, s.type, s.shape, {}, 1};
    const auto it = entries.find(fqn);
    if (it != entries.end()) {
      const dcp_entry& e = *it->second;
      if (e.size != s.shape)
        throw mismatch_error(fmt::format("{}: tensor '{}' is {} there but {} in the output; its chunks cannot be kept",
                                         like->path, fqn, shape_string(e.size), shape_string(s.shape)));
      t.path = e.path.empty() ? std::vector<dcp_path_part>{{fqn}} : e.path;
      std::map<size_t, size_t> per_file;
      for (const auto& c : e.chunks) {
        dcp_out_chunk oc{c.offsets, c.sizes};
        oc.file = file_of(c.storage.relative_path);
        oc.pass = per_file[oc.file]++;
        t.passes = std::max(t.passes, oc.pass + 1);
        t.chunks.push_back(std::move(oc));
      }
    } else {
      t.path = like && !like->key.empty() ? std::vector<dcp_path_part>{{like->key}, {s.name}}
                                          : std::vector<dcp_path_part>{{fqn}};
      dcp_out_chunk oc{std::vector<int64_t>(s.shape.size(), 0), s.shape};
      oc.file = add_file(kDcpSingleFile);
      t.chunks.push_back(std::move(oc));
    }
    for (auto& c : t.chunks) {
      const auto bytes = checked_mul(numel_of(c.sizes), static_cast<uint64_t>(itemsize(t.type)));
      if (!bytes) throw input_error(fmt::format("tensor '{}': a chunk past 2^64 bytes", t.fqn));
      c.nbytes = *bytes;
      c.offset = file_end[c.file];
      c.length = dcp_chunk_archive_size(c.nbytes, dcp_chunk_pickle(t.type, c.sizes).size());
      file_end[c.file] = checked_sum(c.offset, c.length, plan.files[c.file]);
      identity += fmt::format("\n{} {} {} {}", t.fqn, c.file, c.offset, c.length);
    }
    plan.tensors.push_back(std::move(t));
  }
  if (plan.files.size() > kMaxShards)
    throw usage_error(
        fmt::format("{}/: the DCP output would have {} rank files (chunked like {}), more than the {} a "
                    "folder may have",
                    checkpoint_id, plan.files.size(), like ? like->path : "its input", kMaxShards));
  plan.layout.index_name = kDcpMetadataName;
  plan.layout.index_bytes =
      metadata_pickle(plan, checkpoint_id, uuid_like(sha256_hex(identity.data(), identity.size())), swavg);

  plan.layout.format = output_format::dcp;
  plan.layout.specs = std::move(specs);
  plan.layout.shards.resize(plan.files.size());
  for (size_t f = 0; f < plan.files.size(); ++f) {
    plan.layout.shards[f].file = plan.files[f];
    plan.layout.shards[f].file_size = file_end[f];
  }
  for (size_t i = 0; i < plan.tensors.size(); ++i) {
    for (const auto& c : plan.tensors[i].chunks) {
      output_shard& s = plan.layout.shards[c.file];
      if (s.specs.empty() || s.specs.back() != i) s.specs.push_back(i);
      s.bytes += c.nbytes;
      plan.layout.total_size += c.nbytes;
    }
  }
  return plan;
}

struct dcp_sink::impl {
  std::string folder;
  const dcp_plan& plan;
  std::vector<std::unique_ptr<atomic_file>> files;  // by file index; null when not this worker's
  std::vector<std::unique_ptr<zip_writer>> open;    // by chunk of the current tensor
  size_t current = 0;                               // the tensor being written
  uint64_t pos = 0;                                 // its bytes received
  std::vector<uint8_t> held;                        // the tensor, when it takes several passes
  std::vector<int64_t> idx;
  size_t last = 0;  // the chunk that held the previous run
  const std::vector<bool>& owned;

  impl(std::string f, const dcp_plan& p, const std::vector<bool>& o) : folder(std::move(f)), plan(p), owned(o) {}

  const dcp_out_tensor& tensor() const { return plan.tensors[current]; }
  uint64_t tensor_bytes() const {
    uint64_t n = 0;
    for (const auto& c : tensor().chunks) n += c.nbytes;
    return n;
  }

  void open_pass(size_t pass) {
    const dcp_out_tensor& t = tensor();
    open.clear();
    open.resize(t.chunks.size());
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      const dcp_out_chunk& c = t.chunks[i];
      if (c.pass != pass || !files[c.file]) continue;
      atomic_file& out = *files[c.file];
      if (out.tell() != c.offset)
        throw error(exit_code::internal, fmt::format("{}: chunk of '{}' at {}, planned at {}", plan.files[c.file],
                                                     t.fqn, out.tell(), c.offset));
      open[i] = std::make_unique<zip_writer>(out);
      open[i]->begin_record(kDataRecord, c.nbytes);
    }
  }

  void close_pass() {
    const dcp_out_tensor& t = tensor();
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      if (!open[i]) continue;
      const dcp_out_chunk& c = t.chunks[i];
      zip_writer& z = *open[i];
      z.end_record();
      const std::string pkl = dcp_chunk_pickle(t.type, c.sizes);
      z.add(kPickleRecord, pkl.data(), pkl.size());
      z.add(kByteorderRecord, "little", 6);
      z.add(kVersionRecord, kFormatVersion, 2);
      z.finish();
      const uint64_t length = files[c.file]->tell() - c.offset;
      if (length != c.length)
        throw error(exit_code::internal, fmt::format("{}: the archive of a chunk of '{}' is {} bytes, planned {}",
                                                     plan.files[c.file], t.fqn, length, c.length));
    }
    open.clear();
  }

  size_t chunk_at(const std::vector<int64_t>& at) {
    const auto& chunks = tensor().chunks;
    const size_t n = chunks.size();
    if (last < n && chunk_holds(chunks[last], at)) return last;
    if (n > 0 && chunk_holds(chunks[(last + 1) % n], at)) return last = (last + 1) % n;
    for (size_t i = 0; i < n; ++i)
      if (chunk_holds(chunks[i], at)) return last = i;
    throw error(exit_code::internal, fmt::format("DCP output: no chunk of '{}' holds an element", tensor().fqn));
  }

  // Hands the bytes [from, from + n) of the current tensor to the open archives of their chunks.
  void route(const char* data, uint64_t n, uint64_t from) {
    const dcp_out_tensor& t = tensor();
    const uint64_t item = itemsize(t.type);
    const uint64_t total = numel_of(t.shape);
    idx.resize(t.shape.size());
    while (n > 0) {
      const uint64_t e = from / item, within = from % item;
      unravel(e, t.shape, idx);
      const size_t ci = chunk_at(idx);
      const uint64_t run = std::min(run_in_chunk(t.chunks[ci], t.shape, idx, total - e) * item - within, n);
      if (open[ci]) open[ci]->write(data, run);
      data += run;
      n -= run;
      from += run;
    }
  }

  // Starts the next tensor this worker owns; empty ones are written at once.
  void advance() {
    while (current < plan.tensors.size()) {
      if (!owned[current]) {
        ++current;
        continue;
      }
      pos = 0;
      last = 0;
      if (tensor().passes == 1) open_pass(0);
      if (tensor_bytes() > 0) return;
      finish_tensor();
    }
  }

  void finish_tensor() {
    if (tensor().passes == 1) {
      close_pass();
    } else {
      for (size_t pass = 0; pass < tensor().passes; ++pass) {
        open_pass(pass);
        route(reinterpret_cast<const char*>(held.data()), held.size(), 0);
        close_pass();
      }
      held.clear();
      held.shrink_to_fit();
    }
    ++current;
  }
};

dcp_sink::dcp_sink(std::string folder, const dcp_plan& plan, size_t worker_index, size_t worker_count, bool hashed)
    : spec_owned_(plan.tensors.size()) {
  impl_ = std::make_unique<impl>(std::move(folder), plan, spec_owned_);
  impl_->files.resize(plan.files.size());
  for (size_t f = 0; f < plan.files.size(); ++f)
    if (worker_owns(f, worker_index, worker_count)) {
      impl_->files[f] = std::make_unique<atomic_file>(impl_->folder + "/" + plan.files[f]);
      if (hashed) impl_->files[f]->hash_contents();
    }
  for (size_t i = 0; i < plan.tensors.size(); ++i)
    for (const auto& c : plan.tensors[i].chunks) spec_owned_[i] = spec_owned_[i] || impl_->files[c.file] != nullptr;
  impl_->advance();
}

dcp_sink::~dcp_sink() = default;

void dcp_sink::write(const void* data, uint64_t size) {
  impl& m = *impl_;
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    if (m.current >= m.plan.tensors.size())
      throw error(exit_code::internal, "dcp_sink: more bytes than this worker's tensors hold");
    const uint64_t n = std::min(size, m.tensor_bytes() - m.pos);
    if (m.tensor().passes == 1) {
      m.route(p, n, m.pos);
    } else {
      if (m.held.empty()) m.held.reserve(m.tensor_bytes());
      m.held.insert(m.held.end(), p, p + n);
    }
    m.pos += n;
    p += n;
    size -= n;
    if (m.pos == m.tensor_bytes()) {
      m.finish_tensor();
      m.advance();
    }
  }
}

void dcp_sink::commit() {
  impl& m = *impl_;
  if (m.current != m.plan.tensors.size())
    throw error(exit_code::internal, "dcp_sink: committed before all tensors were written");
  for (size_t f = 0; f < m.files.size(); ++f) {
    if (!m.files[f]) continue;
    m.files[f]->commit();
    files_.push_back(written_file{m.plan.files[f], m.files[f]->tell(), m.files[f]->digest()});
  }
}

uint64_t dcp_sink::bytes_written() const {
  uint64_t n = 0;
  for (const auto& f : impl_->files)
    if (f) n += f->tell();
  return n;
}

dcp_folder_writer::dcp_folder_writer(std::string out, const std::string& first_input, const std::string& key)
    : out_(std::move(out)) {
  if (!is_dcp_folder(first_input)) return;
  like_ = std::make_unique<dcp_chunk_source>();
  like_->metadata = read_dcp_metadata(first_input);
  like_->key = key;
  like_->path = without_trailing_slash(first_input) + "/" + kDcpMetadataName;
}

dcp_folder_writer::~dcp_folder_writer() = default;

shard_layout dcp_folder_writer::plan(std::vector<tensor_spec> specs,
                                     const std::map<std::string, std::string>& metadata) const {
  planned_ = std::make_unique<dcp_plan>(plan_dcp(std::move(specs), like_.get(), out_, metadata));
  return planned_->layout;
}

std::unique_ptr<folder_sink> dcp_folder_writer::open(const std::string& folder, const shard_layout& plan,
                                                     const std::map<std::string, std::string>&, size_t worker_index,
                                                     size_t worker_count, bool hashed) const {
  if (!planned_ || opened_ || planned_->layout.index_bytes != plan.index_bytes)
    throw error(exit_code::internal, "dcp_folder_writer: open() once, after the plan() of its layout");
  opened_ = std::move(planned_);
  return std::make_unique<dcp_sink>(folder, *opened_, worker_index, worker_count, hashed);
}

planned_size dcp_folder_writer::planned_file_size(const std::string&, const shard_layout& plan, size_t s,
                                                  const std::map<std::string, std::string>&) const {
  return planned_size{plan.shards.at(s).file_size, true};
}

}  // namespace swavg
