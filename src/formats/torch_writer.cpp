#include "formats/torch_writer.h"

#include <fmt/format.h>

#include <utility>

#include "tensor/state_dict.h"
#include "formats/pickle_opcodes.h"
#include "formats/zip.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace swavg {
namespace {

using namespace pickle_op;

constexpr const char* kArchiveRoot = "archive/";
constexpr const char* kFormatVersion = "3\n";
constexpr uint8_t kProtocol = 2;

// Emits the pickle opcodes (protocol 2) that torch.save uses and that both torch.load's full and
// weights_only unpicklers (1.13 and 2.x) accept.
class pickle_emitter {
 public:
  std::string bytes;

  void proto() {
    op(kProto);
    bytes += static_cast<char>(kProtocol);
  }
  void stop() { op(kStop); }
  void mark() { op(kMark); }
  void global(const std::string& module, const std::string& name) {
    op(kGlobal);
    bytes += module;
    bytes += '\n';
    bytes += name;
    bytes += '\n';
  }
  void empty_tuple() { op(kEmptyTuple); }
  void tuple_from_mark() { op(kTuple); }
  void reduce() { op(kReduce); }
  void setitems() { op(kSetItems); }
  void binpersid() { op(kBinPersId); }
  void boolean(bool v) { op(v ? kNewTrue : kNewFalse); }
  void string(const std::string& s) {
    op(kBinUnicode);
    append_le(static_cast<uint32_t>(s.size()));
    bytes += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      op(kBinInt1);
      bytes += static_cast<char>(v);
    } else if (v >= 0 && v < 65536) {
      op(kBinInt2);
      append_le(static_cast<uint16_t>(v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op(kBinInt);
      append_le(static_cast<int32_t>(v));
    } else {
      op(kLong1);
      bytes += static_cast<char>(sizeof v);  // 8 bytes, two's complement
      append_le(v);
    }
  }
  void int_tuple(const std::vector<int64_t>& values) {
    mark();
    for (int64_t v : values) integer(v);
    tuple_from_mark();
  }
  void empty_ordered_dict() {
    global("collections", "OrderedDict");
    empty_tuple();
    reduce();
  }

 private:
  void op(opcode o) { bytes += static_cast<char>(o); }
  template <typename T>
  void append_le(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
};

}  // namespace

torch_writer::torch_writer(atomic_file& out) : zip_(std::make_unique<zip_writer>(out)) {}
torch_writer::~torch_writer() = default;

std::string torch_writer::begin_storage(dtype type, uint64_t nbytes) {
  std::string key = std::to_string(next_key_++);
  storages_[key] = storage_info{type, nbytes / itemsize(type)};
  zip_->begin_record(kArchiveRoot + std::string("data/") + key, nbytes);
  return key;
}

void torch_writer::write(const void* data, uint64_t size) { zip_->write(data, size); }
void torch_writer::end_storage() { zip_->end_record(); }

void torch_writer::add_tensor(const std::string& name, const std::string& storage_key, int64_t offset,
                              const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  auto it = storages_.find(storage_key);
  if (it == storages_.end())
    throw error(exit_code::internal,
                fmt::format("torch_writer: tensor '{}' refers to unknown storage {}", name, storage_key));
  std::string bounds = check_view_bounds(shape, strides, offset, it->second.numel);
  if (!bounds.empty()) throw error(exit_code::internal, fmt::format("torch_writer: tensor '{}' {}", name, bounds));
  tensors_.push_back(tensor_info{name, storage_key, offset, shape, strides});
}

void torch_writer::add_record(const std::string& name, const std::string& bytes) {
  zip_->add(kArchiveRoot + name, bytes.data(), bytes.size());
}

std::string torch_writer::pickle_state_dict() const {
  pickle_emitter p;
  p.proto();
  p.empty_ordered_dict();
  if (!tensors_.empty()) {
    p.mark();
    for (const auto& t : tensors_) {
      const storage_info& s = storages_.at(t.storage_key);
      p.string(t.name);
      p.global("torch._utils", "_rebuild_tensor_v2");
      p.mark();
      p.mark();
      p.string("storage");
      p.global("torch", storage_class_name(s.type));
      p.string(t.storage_key);
      p.string("cpu");
      p.integer(static_cast<int64_t>(s.numel));
      p.tuple_from_mark();
      p.binpersid();
      p.integer(t.offset);
      p.int_tuple(t.shape);
      p.int_tuple(t.strides);
      p.boolean(false);
      p.empty_ordered_dict();
      p.tuple_from_mark();
      p.reduce();
    }
    p.setitems();
  }
  p.stop();
  return p.bytes;
}

void torch_writer::finish() {
  const std::string pkl = pickle_state_dict();
  zip_->add(kArchiveRoot + std::string("data.pkl"), pkl.data(), pkl.size());
  zip_->add(kArchiveRoot + std::string("byteorder"), "little", 6);
  zip_->add(kArchiveRoot + std::string("version"), kFormatVersion, 2);
  zip_->finish();
}

void write_torch_state_dict(atomic_file& out, const std::vector<named_tensor>& tensors,
                            const std::map<std::string, std::string>& extra_records) {
  torch_writer writer(out);
  // A source storage is its owner plus its key within the owner: views of one storage share it.
  std::map<std::pair<const void*, std::string>, std::string> written;
  for (const auto& t : tensors) {
    const tensor_view& v = t.view;
    auto id = std::make_pair(v.owner.get(), v.storage_key);
    auto it = written.find(id);
    if (it == written.end()) {
      std::string key = writer.begin_storage(v.type, v.storage_bytes);
      writer.write(v.storage, v.storage_bytes);
      writer.end_storage();
      it = written.emplace(id, key).first;
    }
    writer.add_tensor(t.name, it->second, v.offset, v.shape, v.strides);
  }
  for (const auto& [name, bytes] : extra_records) writer.add_record(name, bytes);
  writer.finish();
}

}  // namespace swavg
