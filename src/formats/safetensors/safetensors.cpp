#include "formats/safetensors/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "formats/core/json_dom.h"
#include "util/atomic_file.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/printable.h"

namespace swavg {
namespace {

using json = nlohmann::json;

constexpr uint64_t kMaxElements = uint64_t{1} << 62;  // as check_view_bounds allows
constexpr const char* kMetadataKey = "__metadata__";
constexpr int kMaxJsonDepth = 128;  // serde_json's recursion limit, which the reference inherits

// safetensors 0.8's dtypes, every one; sizes in bits (F4 and F6 pack several values in a byte).
struct known_dtype {
  const char* name;
  size_t bits;
  std::optional<dtype> type;  // nullopt: valid safetensors, but PyTorch (and swavg) has no such dtype
};

const known_dtype kKnownDtypes[] = {
    {"BOOL", 8, dtype::bool_},
    {"F4", 4, dtype::float4_e2m1fn_x2},  // two per float4_e2m1fn_x2 element, along the last dimension
    {"F6_E2M3", 6, std::nullopt},
    {"F6_E3M2", 6, std::nullopt},
    {"U8", 8, dtype::uint8},
    {"I8", 8, dtype::int8},
    {"F8_E5M2", 8, dtype::float8_e5m2},
    {"F8_E4M3", 8, dtype::float8_e4m3fn},
    {"F8_E8M0", 8, dtype::float8_e8m0fnu},
    {"F8_E4M3FNUZ", 8, dtype::float8_e4m3fnuz},
    {"F8_E5M2FNUZ", 8, dtype::float8_e5m2fnuz},
    {"I16", 16, dtype::int16},
    {"U16", 16, dtype::uint16},
    {"F16", 16, dtype::float16},
    {"BF16", 16, dtype::bfloat16},
    {"I32", 32, dtype::int32},
    {"U32", 32, dtype::uint32},
    {"F32", 32, dtype::float32},
    {"C64", 64, dtype::complex64},
    {"F64", 64, dtype::float64},
    {"I64", 64, dtype::int64},
    {"U64", 64, dtype::uint64},
};

// F4's shape counts 4-bit values; torch's float4_e2m1fn_x2 counts bytes of two (safetensors'
// torch.py doubles the last dimension when it saves one).
constexpr int64_t kF4PerElement = 2;

const known_dtype* find_dtype(const std::string& name) {
  for (const auto& d : kKnownDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// A name as it appears in messages: control bytes escaped so that a NUL or a newline stays visible.
std::string escape_controls(const std::string& s) {
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

std::string quote_name(const std::string& s) { return fmt::format("'{}'", escape_controls(s)); }

// A short rendering of a JSON value for messages.
std::string render(const json& j) {
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return escape_controls(s);
}

std::string type_with_article(const json& j) {
  const std::string t = j.type_name();
  const bool vowel = t == "object" || t == "array";
  return (vowel ? "an " : "a ") + t;
}

std::optional<uint64_t> as_non_negative(const json& j) {
  if (j.is_number_unsigned()) return j.get<uint64_t>();
  if (j.is_number_integer() && j.get<int64_t>() >= 0) return static_cast<uint64_t>(j.get<int64_t>());
  return std::nullopt;
}

std::string offsets_string(uint64_t begin, uint64_t end) { return fmt::format("[{}, {}]", begin, end); }

struct entry {
  std::string name;
  const known_dtype* type = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// Builds the header's DOM (json_dom.h), refusing duplicate keys, with the entry they are in, and
// nesting deeper than the reference allows.
class header_parser : public json_dom_parser {
 public:
  explicit header_parser(std::string path)
      : json_dom_parser(std::move(path), kMaxJsonDepth,
                        fmt::format("header nests JSON deeper than {} levels", kMaxJsonDepth),
                        "header is not valid JSON: ") {}

  bool key(string_t& k) override {
    if (dom_.open.size() == 1) top_key_ = k;
    return json_dom_parser::key(k);
  }

 private:
  std::string duplicate_key(const std::string& k) const override {
    if (dom_.open.size() > 1)
      return fmt::format("duplicate key {} in the entry of {}", quote_name(k), quote_name(top_key_));
    return k == kMetadataKey ? std::string("duplicate key '__metadata__'") : "duplicate tensor name " + quote_name(k);
  }

  std::string top_key_;
};

entry parse_entry(const header_parser& p, const std::string& name, const json& value) {
  const std::string where = fmt::format("tensor {}: ", quote_name(name));
  if (name.empty()) p.fail("a tensor has an empty name");
  if (name.find('\0') != std::string::npos) p.fail(where + "name contains a NUL byte");
  if (!value.is_object())
    p.fail(fmt::format("{}entry is {}, expected an object with dtype, shape and data_offsets", where,
                       type_with_article(value)));
  for (const auto& item : value.items())
    if (item.key() != "dtype" && item.key() != "shape" && item.key() != "data_offsets")
      p.fail(
          fmt::format("{}unexpected key {} (expected dtype, shape and data_offsets)", where, quote_name(item.key())));
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!value.contains(key)) p.fail(fmt::format("{}missing '{}'", where, key));

  entry e;
  e.name = name;
  const json& d = value["dtype"];
  if (!d.is_string())
    p.fail(fmt::format("{}dtype is {} {}, expected a string", where, type_with_article(d), render(d)));
  const std::string& dname = d.get_ref<const std::string&>();
  e.type = find_dtype(dname);
  if (!e.type) p.fail(fmt::format("{}unknown dtype {}", where, quote_name(dname)));

  const json& s = value["shape"];
  if (!s.is_array()) p.fail(fmt::format("{}shape is {} {}, expected an array", where, type_with_article(s), render(s)));
  uint64_t extent = 1;
  for (size_t i = 0; i < s.size(); ++i) {
    auto dim = as_non_negative(s[i]);
    if (!dim) {
      const bool negative = s[i].is_number_integer() && !s[i].is_number_unsigned();
      p.fail(
          fmt::format("{}shape element {} is {}{}", where, i, render(s[i]),
                      negative ? ": negative, expected a non-negative integer" : ", expected a non-negative integer"));
    }
    auto next = checked_mul(extent, std::max<uint64_t>(*dim, 1));
    if (!next || *next > kMaxElements) p.fail(fmt::format("{}shape {} is too large", where, render(s)));
    extent = *next;
    e.shape.push_back(static_cast<int64_t>(*dim));
  }

  const json& o = value["data_offsets"];
  if (!o.is_array() || o.size() != 2)
    p.fail(fmt::format("{}data_offsets is {}, expected [begin, end]", where, render(o)));
  for (size_t i = 0; i < 2; ++i) {
    if (!as_non_negative(o[i])) {
      const bool negative = o[i].is_number_integer() && !o[i].is_number_unsigned();
      p.fail(fmt::format("{}data_offsets {}{}: expected two non-negative integers", where, render(o),
                         negative ? " holds a negative number" : ""));
    }
  }
  e.begin = *as_non_negative(o[0]);
  e.end = *as_non_negative(o[1]);
  if (e.end < e.begin)
    p.fail(fmt::format("{}data_offsets {} end before they begin", where, offsets_string(e.begin, e.end)));

  uint64_t numel = 1;
  for (int64_t dim : e.shape) numel *= static_cast<uint64_t>(dim);  // bounded by kMaxElements
  auto bits = checked_mul(numel, e.type->bits);
  const std::string product = e.type->bits % 8 == 0
                                  ? fmt::format("shape {} x {} bytes", shape_string(e.shape), e.type->bits / 8)
                                  : fmt::format("shape {} x {} bits", shape_string(e.shape), e.type->bits);
  if (!bits) p.fail(fmt::format("{}{} overflows", where, product));
  if (*bits % 8 != 0)
    p.fail(fmt::format("{}{} = {} bits, which does not end on a byte boundary", where, product, *bits));
  if (*bits / 8 != e.end - e.begin)
    p.fail(fmt::format("{}{} = {} bytes but data_offsets span {} bytes", where, product, *bits / 8, e.end - e.begin));
  return e;
}

}  // namespace

bool has_safetensors_extension(const std::string& path) {
  const std::string ext = ".safetensors";
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

bool looks_like_safetensors(const uint8_t* data, size_t size) {
  if (size < 9) return false;
  const uint64_t n = load_le<uint64_t>(data);
  return n <= kMaxSafetensorsHeader && n <= size - 8 && data[8] == '{';
}

safetensors_content read_safetensors(const std::shared_ptr<const mapped_file>& file) {
  const std::string& path = file->path();
  header_parser p(path);
  const uint8_t* data = file->data();
  const uint64_t size = file->size();
  if (size < 8) p.fail(fmt::format("file is {} bytes, too short for a safetensors header length (8 bytes)", size));
  const uint64_t n = load_le<uint64_t>(data);
  if (n > kMaxSafetensorsHeader)
    p.fail(fmt::format("header length {} exceeds the limit of {} bytes", n, kMaxSafetensorsHeader));
  if (!range_inside(8, n, size))
    p.fail(fmt::format("header length {} but the file has only {} bytes after the length field", n, size - 8));
  const uint8_t* header = data + 8;
  if (auto bad = invalid_utf8_at(std::string_view(reinterpret_cast<const char*>(header), n)))
    p.fail(fmt::format("header is not valid UTF-8 (byte {} of the file)", 8 + *bad));

  if (n >= 3 && header[0] == 0xEF && header[1] == 0xBB && header[2] == 0xBF)
    p.fail("header is not valid JSON: it starts with a UTF-8 byte order mark");
  // nlohmann's lexer takes a raw NUL byte for the end of the input; JSON allows none anywhere.
  if (const void* nul = std::memchr(header, 0, n))
    p.fail(fmt::format("header is not valid JSON: NUL byte at byte {} of the file",
                       8 + (static_cast<const uint8_t*>(nul) - header)));
  const char* text = reinterpret_cast<const char*>(header);
  json doc = p.parse(std::string_view(text, n));
  if (!doc.is_object()) p.fail(fmt::format("header is {}, expected a JSON object", type_with_article(doc)));

  safetensors_content out;
  std::vector<entry> entries;
  for (const auto& item : doc.items()) {
    if (item.key() == kMetadataKey) {
      const json& m = item.value();
      if (m.is_null()) continue;
      if (!m.is_object())
        p.fail(fmt::format("__metadata__ is {}, expected an object of strings", type_with_article(m)));
      for (const auto& kv : m.items()) {
        if (!kv.value().is_string())
          p.fail(fmt::format("__metadata__ value for key {} is {} {}, expected a string", quote_name(kv.key()),
                             type_with_article(kv.value()), render(kv.value())));
        out.metadata[kv.key()] = kv.value().get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(p, item.key(), item.value()));
  }

  std::stable_sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const uint64_t data_len = size - 8 - n;
  uint64_t expected = 0;
  const entry* previous = nullptr;
  for (const auto& e : entries) {
    const std::string where =
        fmt::format("tensor {}: data_offsets {}", quote_name(e.name), offsets_string(e.begin, e.end));
    if (e.begin > expected) {
      if (previous)
        p.fail(fmt::format("{} leave a gap of {} bytes after tensor {} which ends at {}", where, e.begin - expected,
                           quote_name(previous->name), expected));
      p.fail(fmt::format("{} leave a gap of {} bytes at the start of the data section", where, e.begin));
    }
    if (e.begin < expected)
      p.fail(fmt::format("{} overlap tensor {} at {}", where, quote_name(previous->name),
                         offsets_string(previous->begin, previous->end)));
    if (e.end > data_len) p.fail(fmt::format("{} are out of range: the data section has {} bytes", where, data_len));
    expected = e.end;
    previous = &e;
  }
  if (expected != data_len)
    p.fail(fmt::format("the data section has {} bytes but the tensors end at {}: {} trailing bytes", data_len, expected,
                       data_len - expected));

  const uint8_t* base = data + 8 + n;
  out.tensors.reserve(entries.size());
  for (const auto& e : entries) {
    if (!e.type->type)
      p.fail(fmt::format("tensor {}: dtype {} ({}-bit floats) has no PyTorch dtype, so swavg cannot read it",
                         quote_name(e.name), e.type->name, e.type->bits));
    named_tensor t;
    t.name = e.name;
    t.view.type = *e.type->type;
    t.view.shape = e.shape;
    if (t.view.type == dtype::float4_e2m1fn_x2) {
      if (e.shape.empty() || e.shape.back() % kF4PerElement != 0)
        p.fail(
            fmt::format("tensor {}: F4 shape {} has {} last dimension; PyTorch's float4_e2m1fn_x2 holds two "
                        "values per byte along it, so swavg cannot read it",
                        quote_name(e.name), shape_string(e.shape), e.shape.empty() ? "no" : "an odd"));
      t.view.shape.back() /= kF4PerElement;
    }
    t.view.strides = contiguous_strides(t.view.shape);
    t.view.offset = 0;
    t.view.storage = base + e.begin;
    t.view.storage_bytes = e.end - e.begin;
    t.view.storage_key = e.name;
    t.view.owner = file;
    t.view.mapping = file.get();
    out.tensors.push_back(std::move(t));
  }
  return out;
}

namespace {

// The header the writer emits for `specs` and `metadata`, padded; `data_bytes` is set to the data
// section's size. Throws usage_error naming `path` as the writer does.
std::string writer_header(const std::string& path, const std::vector<tensor_spec>& specs,
                          const std::map<std::string, std::string>& metadata, uint64_t& data_bytes) {
  auto fail = [&](const std::string& message) { throw usage_error(fmt::format("{}: {}", path, message)); };

  // The header is built as text: a JSON object looked up by name for each tensor would make the
  // writer quadratic in the tensor count.
  std::string text = "{";
  size_t estimate = 2;  // one allocation for the usual header (a growing string would peak at twice its size)
  for (const auto& s : specs) estimate += s.name.size() + 72 + 21 * s.shape.size();
  text.reserve(estimate);
  if (!metadata.empty()) {
    nlohmann::json m = nlohmann::json::object();
    for (const auto& [k, v] : metadata) {
      if (!valid_utf8(k) || !valid_utf8(v)) fail(fmt::format("metadata entry {} is not valid UTF-8", quote_name(k)));
      m[k] = v;
    }
    text += nlohmann::json(kMetadataKey).dump() + ":" + m.dump();
  }
  uint64_t expected = 0;
  std::unordered_set<std::string_view> names;
  names.reserve(specs.size());
  for (const auto& s : specs) {
    if (s.name.empty()) fail("cannot write a tensor with an empty name");
    if (s.name == kMetadataKey) fail("cannot write a tensor named '__metadata__'");
    if (s.name.find('\0') != std::string::npos)
      fail(fmt::format("tensor name {} contains a NUL byte", quote_name(s.name)));
    if (!valid_utf8(s.name)) fail(fmt::format("tensor name {} is not valid UTF-8", quote_name(s.name)));
    if (!names.insert(s.name).second) fail("duplicate tensor name " + quote_name(s.name));
    const char* type = safetensors_dtype_name(s.type);
    if (!type)
      fail(
          fmt::format("safetensors cannot hold {} tensor {} (safetensors 0.8 has no such dtype); write --format "
                      "torch instead",
                      dtype_name(s.type), quote_name(s.name)));
    std::vector<int64_t> shape = s.shape;
    if (s.type == dtype::float4_e2m1fn_x2) {
      if (shape.empty())
        fail(
            fmt::format("safetensors cannot hold the 0-dim float4_e2m1fn_x2 tensor {} (F4 counts the two values "
                        "along the last dimension); write --format torch instead",
                        quote_name(s.name)));
      shape.back() *= kF4PerElement;
    }
    std::optional<uint64_t> nbytes = itemsize(s.type);
    for (int64_t dim : s.shape) {
      if (dim < 0)
        fail(fmt::format("tensor {} has negative size in shape {}", quote_name(s.name), shape_string(s.shape)));
      if (nbytes) nbytes = checked_mul(*nbytes, static_cast<uint64_t>(dim));
    }
    auto end = nbytes ? checked_add(expected, *nbytes) : std::nullopt;
    if (!end) fail(fmt::format("tensor {} of shape {} is too large", quote_name(s.name), shape_string(s.shape)));
    if (text.size() > 1) text += ',';
    text += nlohmann::json(s.name).dump();
    fmt::format_to(std::back_inserter(text), ":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}", type,
                   fmt::join(shape, ","), expected, *end);
    expected = *end;
  }
  text += '}';
  text.append((8 - text.size() % 8) % 8, ' ');
  if (text.size() > kMaxSafetensorsHeader)
    fail(fmt::format("the safetensors header would be {} bytes, over the limit of {}", text.size(),
                     kMaxSafetensorsHeader));
  data_bytes = expected;
  return text;
}

}  // namespace

uint64_t safetensors_file_size(const std::string& path, const std::vector<tensor_spec>& specs,
                               const std::map<std::string, std::string>& metadata) {
  uint64_t data_bytes = 0;
  const std::string header = writer_header(path, specs, metadata, data_bytes);
  const auto size = checked_add(uint64_t{8} + header.size(), data_bytes);
  if (!size) throw usage_error(fmt::format("{}: the safetensors file's size overflows", path));
  return *size;
}

safetensors_writer::safetensors_writer(atomic_file& out, const std::vector<tensor_spec>& specs,
                                       const std::map<std::string, std::string>& metadata)
    : out_(out) {
  const std::string text = writer_header(out.target(), specs, metadata, expected_);
  uint8_t length[8];
  store_le<uint64_t>(length, text.size());
  out_.write(length, sizeof length);
  out_.write(text.data(), text.size());
}

void safetensors_writer::write(const void* data, uint64_t size) {
  auto total = checked_add(written_, size);
  if (!total || *total > expected_)
    throw error(exit_code::internal,
                fmt::format("{}: safetensors writer got more than the {} declared bytes", out_.target(), expected_));
  out_.write(data, size);
  written_ = *total;
}

void safetensors_writer::finish() {
  if (written_ != expected_)
    throw error(exit_code::internal, fmt::format("{}: safetensors writer got {} bytes but the header declares {}",
                                                 out_.target(), written_, expected_));
}

}  // namespace swavg
