#include "formats/torch_writer.h"

#include <utility>

#include "tensor/state_dict.h"
#include "formats/zip.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace swavg {
namespace {

constexpr const char* kArchiveRoot = "archive/";
constexpr const char* kFormatVersion = "3\n";

// Emits the pickle opcodes (protocol 2) that torch.save uses and that both torch.load's full and
// weights_only unpicklers (1.13 and 2.x) accept.
class pickle_emitter {
 public:
  std::string bytes;

  void proto() { bytes += "\x80\x02"; }
  void stop() { bytes += '.'; }
  void mark() { bytes += '('; }
  void global(const std::string& module, const std::string& name) { bytes += "c" + module + "\n" + name + "\n"; }
  void empty_tuple() { bytes += ')'; }
  void tuple_from_mark() { bytes += 't'; }
  void reduce() { bytes += 'R'; }
  void setitems() { bytes += 'u'; }
  void binpersid() { bytes += 'Q'; }
  void boolean(bool v) { bytes += v ? '\x88' : '\x89'; }
  void string(const std::string& s) {
    bytes += 'X';
    append_le(static_cast<uint32_t>(s.size()));
    bytes += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      bytes += 'K';
      bytes += static_cast<char>(v);
    } else if (v >= 0 && v < 65536) {
      bytes += 'M';
      append_le(static_cast<uint16_t>(v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      bytes += 'J';
      append_le(static_cast<int32_t>(v));
    } else {
      bytes += "\x8a\x08";  // LONG1, 8 bytes two's complement
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
    throw error(exit_code::internal, "torch_writer: tensor '" + name + "' refers to unknown storage " + storage_key);
  std::string bounds = check_view_bounds(shape, strides, offset, it->second.numel);
  if (!bounds.empty()) throw error(exit_code::internal, "torch_writer: tensor '" + name + "' " + bounds);
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
