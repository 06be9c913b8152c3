#include "formats/dataset/dataset.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <string_view>

#include "formats/pickle/pickle.h"
#include "formats/pickle/pickle_query.h"
#include "formats/safetensors/safetensors.h"
#include "formats/torch/torch_file.h"
#include "formats/zip/zip_reader.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace swavg {
namespace {

constexpr char kNpyMagic[] = "\x93NUMPY";
constexpr size_t kNpyMagicSize = 6;

// The subset of Python literal syntax numpy writes in .npy headers: a dict of string keys whose
// values are strings, True/False or tuples of integers.
class npy_literal {
 public:
  npy_literal(std::string_view text, std::string context) : text_(text), context_(std::move(context)) {}

  [[noreturn]] void fail(const std::string& what) const {
    std::string near(text_.substr(pos_, 30));
    for (char& c : near)
      if (c == '\n') c = ' ';
    throw input_error(fmt::format("{}: malformed .npy header: {} at byte {}{}", context_, what, pos_,
                                  near.empty() ? std::string(" (end of header)") : fmt::format(" near \"{}\"", near)));
  }

  void skip_space() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r'))
      ++pos_;
  }

  bool consume(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  void expect(char c) {
    if (!consume(c)) fail(fmt::format("expected '{}'", c));
  }

  char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }

  std::string string_value() {
    skip_space();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) fail("expected a string");
    const char quote = text_[pos_++];
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] == '\\') fail("escape sequences are not expected in a .npy header");
      out += text_[pos_++];
    }
    if (pos_ >= text_.size()) fail("unterminated string");
    ++pos_;
    return out;
  }

  bool bool_value() {
    skip_space();
    for (const auto& [word, value] : {std::pair<std::string_view, bool>{"True", true}, {"False", false}})
      if (text_.substr(pos_, word.size()) == word) {
        pos_ += word.size();
        return value;
      }
    fail("expected True or False");
  }

  int64_t int_value() {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == '-') fail("negative dimension");
    uint64_t v = 0;
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      auto next = checked_mul(v, 10);
      next = next ? checked_add(*next, static_cast<uint64_t>(text_[pos_] - '0')) : std::nullopt;
      if (!next || *next > static_cast<uint64_t>(INT64_MAX)) fail("dimension too large");
      v = *next;
      ++pos_;
    }
    if (pos_ == start) fail("expected an integer");
    if (pos_ < text_.size() && text_[pos_] == 'L') ++pos_;  // Python 2 longs
    return static_cast<int64_t>(v);
  }

  std::vector<int64_t> int_tuple() {
    expect('(');
    std::vector<int64_t> out;
    while (!consume(')')) {
      out.push_back(int_value());
      if (!consume(',')) {
        expect(')');
        break;
      }
    }
    return out;
  }

  bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }

 private:
  std::string_view text_;
  std::string context_;
  size_t pos_ = 0;
};

dtype npy_dtype(const std::string& descr, const std::string& path) {
  if (descr.empty()) throw input_error(path + ": .npy header has an empty 'descr'");
  char order = descr[0];
  std::string code = descr;
  if (order == '<' || order == '>' || order == '|' || order == '=')
    code = descr.substr(1);
  else
    order = '|';
  struct entry {
    const char* code;
    dtype type;
  };
  static const entry kCodes[] = {{"f2", dtype::float16},   {"f4", dtype::float32},    {"f8", dtype::float64},
                                 {"i1", dtype::int8},      {"i2", dtype::int16},      {"i4", dtype::int32},
                                 {"i8", dtype::int64},     {"u1", dtype::uint8},      {"b1", dtype::bool_},
                                 {"c8", dtype::complex64}, {"c16", dtype::complex128}};
  for (const auto& e : kCodes) {
    if (code != e.code) continue;
    if (order == '>' && itemsize(e.type) > 1)
      throw input_error(
          fmt::format("{}: .npy array is big-endian ('{}'); swavg reads little-endian data: "
                      "save it with arr.astype(arr.dtype.newbyteorder('<'))",
                      path, descr));
    return e.type;
  }
  throw input_error(
      fmt::format("{}: .npy dtype '{}' is not supported (supported: float16/32/64, int8/16/32/64, "
                  "uint8, bool, complex64/128)",
                  path, descr));
}

std::vector<int64_t> fortran_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

// Checks that a contiguous (C or Fortran order) array of `shape` fits in `available` bytes.
uint64_t array_bytes(const std::vector<int64_t>& shape, dtype type, const std::string& what) {
  uint64_t n = itemsize(type);
  for (int64_t d : shape) {
    auto next = checked_mul(n, static_cast<uint64_t>(d));
    if (!next || *next > (uint64_t{1} << 62))
      throw input_error(fmt::format("{}: shape {} is too large", what, shape_string(shape)));
    n = *next;
  }
  return n;
}

dataset read_npy(const std::shared_ptr<const mapped_file>& file) {
  const std::string& path = file->path();
  npy_header h = parse_npy_header(file->data(), file->size(), path);
  if (h.shape.empty())
    throw input_error(path + ": .npy array is 0-dimensional; expected samples along the first dimension");
  const uint64_t needed = array_bytes(h.shape, h.type, path);
  const uint64_t available = file->size() - h.data_offset;
  if (available < needed)
    throw input_error(
        fmt::format("{}: .npy header says {} {} ({} bytes) but the file holds {} bytes after the header "
                    "(truncated?)",
                    path, dtype_name(h.type), shape_string(h.shape), needed, available));
  if (available > needed) spdlog::debug("{}: {} bytes after the array are ignored", path, available - needed);
  dataset d;
  d.path = path;
  d.format = "npy";
  d.samples.type = h.type;
  d.samples.shape = h.shape;
  d.samples.strides = h.fortran_order ? fortran_strides(h.shape) : contiguous_strides(h.shape);
  d.samples.storage = file->data() + h.data_offset;
  d.samples.storage_bytes = needed;
  d.samples.storage_key = "npy";
  d.samples.owner = file;
  d.samples.mapping = file.get();
  return d;
}

dataset read_torch_data(const std::shared_ptr<const mapped_file>& file, const std::string& key) {
  const std::string& path = file->path();
  {
    zip_reader zip = read_zip(*file);
    bool npz = !zip.entries().empty();
    for (const auto& e : zip.entries()) npz &= e.name.size() > 4 && e.name.compare(e.name.size() - 4, 4, ".npy") == 0;
    if (npz) throw input_error(path + ": is an .npz archive; save the array alone with numpy.save (.npy)");
  }
  const torch_archive archive = open_torch_archive(file, "data (a tensor saved with torch.save)");
  const pickle_node* root = archive.doc->root();

  dataset d;
  d.path = path;
  d.format = "torch";
  const pickle_node* chosen = nullptr;
  if (!key.empty()) {
    chosen = resolve_pickle_path(root, key, path, "--data-key");
    if (!is_tensor(chosen))
      throw usage_error(fmt::format("{}: --data-key '{}' is a {}, expected a tensor", path, key,
                                    chosen ? pickle_type_name(*chosen) : "None"));
    d.key = key;
  } else if (is_tensor(root)) {
    chosen = root;
  } else if (root && (root->kind == pickle_kind::dict || is_sequence(root))) {
    std::vector<std::string> keys;
    if (root->kind == pickle_kind::dict)
      for (const auto& [k, v] : root->entries) keys.push_back(pickle_key_text(k));
    else
      for (size_t i = 0; i < root->items.size(); ++i) keys.push_back(std::to_string(i));
    for (size_t i = 0; i < keys.size() && !chosen; ++i) {
      const pickle_node* v = root->kind == pickle_kind::dict ? root->entries[i].second : root->items[i];
      if (is_tensor(v)) {
        chosen = v;
        d.key = keys[i];
      }
    }
    if (!chosen)
      throw input_error(
          fmt::format("{}: the {} at the top level holds no tensor (entries: {}); choose one with "
                      "--data-key",
                      path, pickle_type_name(*root), quoted_list(keys)));
    spdlog::info("{}: took the input tensor at '{}' (choose another with --data-key)", path, d.key);
  } else {
    throw input_error(fmt::format("{}: the top level is a {}, expected a tensor or a list, tuple or dict holding one",
                                  path, root ? pickle_type_name(*root) : "None"));
  }

  const pickle_tensor_ref& t = *chosen->tensor;
  d.samples = archive_storages(archive).view_of("the input tensor", t);
  if (t.shape.empty())
    throw input_error(path + ": the input tensor is 0-dimensional; expected samples along the first dimension");
  return d;
}

dataset read_safetensors_data(const std::shared_ptr<const mapped_file>& file, const std::string& key) {
  const std::string& path = file->path();
  safetensors_content content = read_safetensors(file);
  std::vector<std::string> names;
  for (const auto& t : content.tensors) names.push_back(t.name);
  dataset d;
  d.path = path;
  d.format = "safetensors";
  const named_tensor* chosen = nullptr;
  if (!key.empty()) {
    for (const auto& t : content.tensors)
      if (t.name == key) chosen = &t;
    if (!chosen)
      throw usage_error(fmt::format("{}: --data-key '{}': no such tensor; tensors: {}", path, key, quoted_list(names)));
  } else if (content.tensors.size() == 1) {
    chosen = &content.tensors.front();
  } else {
    throw usage_error(fmt::format("{}: holds {} tensors ({}); name the input with --data-key", path, names.size(),
                                  quoted_list(names)));
  }
  if (chosen->view.shape.empty())
    throw input_error(fmt::format("{}: tensor '{}' is 0-dimensional; expected samples along the first dimension", path,
                                  chosen->name));
  d.key = chosen->name;
  d.samples = chosen->view;
  return d;
}

dataset read_raw(const std::shared_ptr<const mapped_file>& file, const dataset_options& o) {
  const std::string& path = file->path();
  const dtype type = o.type.value_or(dtype::float32);
  const std::string type_name = dtype_name(type);
  for (int64_t s : o.shape)
    if (s <= 0) throw usage_error("--shape: every dimension must be positive, got " + shape_string(o.shape));
  const uint64_t sample_bytes = array_bytes(o.shape, type, "--shape");
  if (file->size() % sample_bytes != 0)
    throw input_error(fmt::format("{}: holds {} bytes, not a whole number of samples of {} {} ({} bytes each)", path,
                                  file->size(), type_name, shape_string(o.shape), sample_bytes));
  dataset d;
  d.path = path;
  d.format = "raw";
  d.samples.type = type;
  d.samples.shape = o.shape;
  d.samples.shape.insert(d.samples.shape.begin(), static_cast<int64_t>(file->size() / sample_bytes));
  d.samples.strides = contiguous_strides(d.samples.shape);
  d.samples.storage = file->data();
  d.samples.storage_bytes = file->size();
  d.samples.storage_key = "raw";
  d.samples.owner = file;
  d.samples.mapping = file.get();
  return d;
}

}  // namespace

bool looks_like_npy(const uint8_t* data, size_t size) {
  return size >= kNpyMagicSize && std::memcmp(data, kNpyMagic, kNpyMagicSize) == 0;
}

npy_header parse_npy_header(const uint8_t* data, size_t size, const std::string& path) {
  if (!looks_like_npy(data, size)) throw input_error(path + ": not a .npy file (no \\x93NUMPY magic)");
  if (size < 10) throw input_error(path + ": .npy file truncated inside its preamble");
  const int major = data[6];
  uint64_t length_size;
  if (major == 1)
    length_size = 2;
  else if (major == 2 || major == 3)
    length_size = 4;
  else
    throw input_error(fmt::format("{}: .npy format version {}.{} is not supported (1.0 to 3.0 are)", path, major,
                                  static_cast<int>(data[7])));
  const uint64_t start = 8 + length_size;
  if (size < start) throw input_error(path + ": .npy file truncated inside its preamble");
  const uint64_t length = length_size == 2 ? load_le<uint16_t>(data + 8) : load_le<uint32_t>(data + 8);
  if (!range_inside(start, length, size))
    throw input_error(
        fmt::format("{}: .npy header of {} bytes runs past the end of the file ({} bytes)", path, length, size));
  std::string_view text(reinterpret_cast<const char*>(data + start), length);
  if (text.find('\0') != std::string_view::npos)
    throw input_error(path + ": malformed .npy header: it holds a NUL byte");

  npy_literal p(text, path);
  npy_header h;
  bool have_descr = false, have_order = false, have_shape = false;
  p.expect('{');
  while (!p.consume('}')) {
    const std::string key = p.string_value();
    p.expect(':');
    if (key == "descr") {
      if (have_descr) p.fail("duplicate key 'descr'");
      if (p.peek() == '[')
        throw input_error(path + ": .npy array has a structured dtype; expected a plain numeric array");
      h.type = npy_dtype(p.string_value(), path);
      have_descr = true;
    } else if (key == "fortran_order") {
      if (have_order) p.fail("duplicate key 'fortran_order'");
      h.fortran_order = p.bool_value();
      have_order = true;
    } else if (key == "shape") {
      if (have_shape) p.fail("duplicate key 'shape'");
      h.shape = p.int_tuple();
      have_shape = true;
    } else {
      p.fail(fmt::format("unexpected key '{}'", key));
    }
    if (!p.consume(',')) {
      p.expect('}');
      break;
    }
  }
  if (!p.at_end()) p.fail("unexpected text after the header dict");
  if (!have_descr || !have_order || !have_shape) {
    std::vector<std::string> missing;
    if (!have_descr) missing.push_back("descr");
    if (!have_order) missing.push_back("fortran_order");
    if (!have_shape) missing.push_back("shape");
    throw input_error(fmt::format("{}: malformed .npy header: missing {}", path, quoted_list(missing)));
  }
  h.data_offset = start + length;
  return h;
}

dataset open_dataset(const dataset_options& o) {
  auto file = mapped_file::open(o.path);
  const std::string& path = o.path;
  dataset d;
  if (!o.shape.empty()) {
    if (!o.key.empty())
      throw usage_error("--data-key applies to torch.save and safetensors data, not raw data (--shape)");
    d = read_raw(file, o);
  } else if (o.type) {
    throw usage_error("--dtype describes raw data and needs --shape (the shape of one sample)");
  } else if (looks_like_npy(file->data(), file->size())) {
    if (!o.key.empty())
      throw usage_error(path + ": --data-key applies to torch.save and safetensors data, this is .npy");
    d = read_npy(file);
  } else if (looks_like_zip(file->data(), file->size())) {
    d = read_torch_data(file, o.key);
  } else if (looks_like_safetensors(file->data(), file->size())) {
    d = read_safetensors_data(file, o.key);
  } else {
    throw input_error(path +
                      ": not a .npy, torch.save or safetensors file; for raw binary data give --shape (one "
                      "sample, e.g. 3,32,32) and --dtype");
  }
  if (d.samples.numel() == 0)
    throw input_error(
        fmt::format("{}: holds no samples or empty ones (shape {})", path, shape_string(d.samples.shape)));
  return d;
}

}  // namespace swavg
