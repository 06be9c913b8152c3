// The legacy torch.save format: its five pickles and its storage table (see legacy_torch_file.h).
#include "formats/torch/legacy_torch_file.h"

#include <fmt/format.h>

#include <cstring>
#include <unordered_map>
#include <vector>

#include "formats/pickle/pickle.h"
#include "formats/pickle/unpickler.h"
#include "formats/torch/torch_state_dict.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace swavg {
namespace {

// torch/serialization.py's MAGIC_NUMBER as the little-endian bytes of the int pickle carries.
constexpr uint8_t kMagic[] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr char kMagicText[] = "L119547037146038801333356L\n";  // protocols 0 and 1
constexpr int64_t kProtocolVersion = 1001;
constexpr int kPickles = 5;
constexpr size_t kCountBytes = 8;

std::string value_text(const pickle_node* n) {
  if (!n) return "nothing";
  if (n->kind == pickle_kind::integer) return fmt::format("the int {}", n->int_value);
  if (n->kind == pickle_kind::big_integer) {
    std::string hex = "0x";
    for (size_t i = n->text.size(); i-- > 0;) hex += fmt::format("{:02x}", static_cast<uint8_t>(n->text[i]));
    return n->text.size() <= 16 ? "the int " + hex : fmt::format("an int of {} bytes", n->text.size());
  }
  return "a " + pickle_type_name(*n);
}

class legacy_reader {
 public:
  explicit legacy_reader(const std::shared_ptr<const mapped_file>& file) : file_(file), path_(file->path()) {}

  state_dict read(const std::string& key) {
    check_magic();
    const auto version = next("the protocol version", 2);
    const pickle_node* v = version->root();
    if (!v || v->kind != pickle_kind::integer || v->int_value != kProtocolVersion)
      throw input_error(fmt::format("{}: legacy torch.save protocol version is {}, expected the int {}", path_,
                                    value_text(v), kProtocolVersion));
    next("the system information", 3);
    auto object = next("the object", 4);
    const auto keys = next("the storage key list", 5);
    read_storages(*object, keys->root());
    torch_storage_reader reader(file_, [this](const std::string& k) {
      auto it = records_.find(k);
      if (it == records_.end())
        throw input_error(fmt::format("{}: storage '{}' is not in the storage key list", path_, k));
      return it->second;
    });
    return take_state_dict(path_, std::move(object), reader, key);
  }

 private:
  std::unique_ptr<pickle_document> next(const char* what, int index) {
    if (pos_ >= file_->size())
      throw input_error(
          fmt::format("{}: legacy torch.save file ends at byte {} where {} (pickle {} of {}) should start", path_, pos_,
                      what, index, kPickles));
    auto doc =
        unpickle(file_->data() + pos_, file_->size() - pos_,
                 fmt::format("{}: {} (pickle {} of {}, starting at file byte {})", path_, what, index, kPickles, pos_));
    pos_ += doc->consumed();
    return doc;
  }

  void check_magic() {
    const auto magic = next("the magic number", 1);
    const pickle_node* m = magic->root();
    if (!m || m->kind != pickle_kind::big_integer || m->text.size() != sizeof kMagic ||
        std::memcmp(m->text.data(), kMagic, sizeof kMagic) != 0)
      throw input_error(
          fmt::format("{}: not a torch.save file: its first pickle holds {}, expected the legacy format's magic number "
                      "0x1950a86a20f9469cfc6c",
                      path_, value_text(m)));
  }

  void read_storages(const pickle_document& object, const pickle_node* list) {
    std::unordered_map<std::string, const pickle_storage_ref*> used;  // key -> the first reference
    std::vector<const pickle_storage_ref*> used_order;
    for (const pickle_storage_ref* s : object.storages())
      if (used.emplace(s->key, s).second) used_order.push_back(s);
    if (!list || list->kind != pickle_kind::list)
      throw input_error(fmt::format("{}: the storage key list (pickle 5 of {}) is {}, expected a list of str", path_,
                                    kPickles, value_text(list)));
    std::unordered_map<std::string, size_t> listed;
    const size_t n = list->items.size();
    for (size_t i = 0; i < n; ++i) {
      const pickle_node* k = list->items[i];
      if (!k || k->kind != pickle_kind::string)
        throw input_error(
            fmt::format("{}: entry {} of the storage key list is {}, expected a str", path_, i, value_text(k)));
      auto [seen, fresh] = listed.emplace(k->text, i);
      if (!fresh)
        throw input_error(
            fmt::format("{}: storage key '{}' is listed twice (entries {} and {} of the storage key list)", path_,
                        k->text, seen->second, i));
      auto ref = used.find(k->text);
      if (ref == used.end())
        throw input_error(
            fmt::format("{}: storage key '{}' (entry {} of the storage key list) names no storage of the object", path_,
                        k->text, i));
      read_storage(*ref->second, i, n);
    }
    for (const pickle_storage_ref* s : used_order)
      if (!listed.count(s->key))
        throw input_error(
            fmt::format("{}: storage '{}' is used by the object but missing from the storage key list (its bytes are "
                        "not in the file)",
                        path_, s->key));
    if (pos_ != file_->size())
      throw input_error(
          fmt::format("{}: {} bytes follow the last storage (which ends at byte {}); expected the end of the file",
                      path_, file_->size() - pos_, pos_));
  }

  void read_storage(const pickle_storage_ref& s, size_t index, size_t count) {
    const uint64_t size = file_->size();
    const std::string what = fmt::format("storage '{}' ({} of {})", s.key, index + 1, count);
    if (!range_inside(pos_, kCountBytes, size))
      throw input_error(fmt::format("{}: {}: its element count at byte {} needs {} bytes, the file has {} left", path_,
                                    what, pos_, kCountBytes, size - pos_));
    const int64_t elements = load_le<int64_t>(file_->data() + pos_);
    if (elements < 0 || static_cast<uint64_t>(elements) != s.numel)
      throw input_error(fmt::format("{}: {}: the file gives {} elements at byte {}, the object declares {} ({})", path_,
                                    what, elements, pos_, s.numel, storage_class_of(s)));
    const uint64_t at = pos_ + kCountBytes;
    const auto bytes = checked_mul(s.numel, itemsize(s.type));
    if (!bytes || !range_inside(at, *bytes, size))
      throw input_error(fmt::format("{}: {}: {} elements of {} need {} bytes at byte {}, the file has {} left", path_,
                                    what, s.numel, storage_class_of(s),
                                    bytes ? std::to_string(*bytes) : std::string("more than 2^64"), at, size - at));
    records_[s.key] = storage_record{fmt::format("storage '{}' (at byte {})", s.key, at), file_->data() + at, *bytes};
    pos_ = at + *bytes;
  }

  std::shared_ptr<const mapped_file> file_;
  const std::string& path_;
  size_t pos_ = 0;
  std::unordered_map<std::string, storage_record> records_;
};

}  // namespace

bool looks_like_legacy_torch_file(const uint8_t* data, size_t size) {
  if (size >= 2 && data[0] == 0x80 && data[1] <= 5) return true;
  const size_t text = sizeof kMagicText - 1;
  return size >= text && std::memcmp(data, kMagicText, text) == 0;
}

state_dict read_legacy_torch_file(const std::shared_ptr<const mapped_file>& file, const std::string& key) {
  return legacy_reader(file).read(key);
}

}  // namespace swavg
