#include "tensor/tensor_view.h"

#include <fmt/format.h>

#include <cstring>

#include <algorithm>
#include <stdexcept>

#include "util/checked.h"
#include "util/mapped_file.h"

namespace swavg {

int64_t tensor_view::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

uint64_t tensor_view::nbytes() const { return static_cast<uint64_t>(numel()) * itemsize(type); }

bool tensor_view::is_contiguous() const {
  if (pieces) return false;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return numel() == 0;
    expected *= shape[i];
  }
  return true;
}

const uint8_t* tensor_view::data() const {
  return pieces ? nullptr : storage + static_cast<uint64_t>(offset) * itemsize(type);
}

namespace {

// Copies the elements of the plain view `v` to `dst`, the element at index i to element
// sum(i[d] * dst_strides[d]) of dst, row by row along the last dimension (dst_strides.back() is 1).
void copy_rows(const tensor_view& v, uint8_t* dst, const std::vector<int64_t>& dst_strides) {
  const size_t item = itemsize(v.type);
  const int64_t n = v.numel();
  if (n == 0) return;
  const uint8_t* base = v.data();
  const size_t dims = v.shape.size();
  if (dims == 0) {
    std::memcpy(dst, base, item);
    return;
  }
  // Rows along the last dimension; the index of the outer dimensions counts like an odometer.
  const int64_t row = v.shape[dims - 1];
  const int64_t step = v.strides[dims - 1];
  const auto isz = static_cast<int64_t>(item);
  std::vector<int64_t> index(dims - 1, 0);
  for (int64_t done = 0; done < n; done += row) {
    int64_t from = 0, to = 0;
    for (size_t d = 0; d + 1 < dims; ++d) {
      from += index[d] * v.strides[d];
      to += index[d] * dst_strides[d];
    }
    const uint8_t* src = base + from * isz;
    uint8_t* out = dst + to * isz;
    if (step == 1 || row == 1) {
      std::memcpy(out, src, static_cast<size_t>(row) * item);
    } else {
      for (int64_t i = 0; i < row; ++i) std::memcpy(out + i * isz, src + i * step * isz, item);
    }
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < v.shape[d]) break;
      index[d] = 0;
    }
  }
}

// The row-major index in a tensor of `strides` of the element at `index`.
int64_t flat_index(const std::vector<int64_t>& index, const std::vector<int64_t>& strides) {
  int64_t at = 0;
  for (size_t d = 0; d < index.size(); ++d) at += index[d] * strides[d];
  return at;
}

// Elements [0, span) past the plain view's first one hold every element it reaches.
int64_t element_span(const tensor_view& v) {
  int64_t last = 0;
  for (size_t d = 0; d < v.shape.size(); ++d) last += (v.shape[d] - 1) * v.strides[d];
  return last + 1;
}

// Whether the piece holds elements [start, start + numel) of the tensor `v` (flat, or whole rows
// of it: Shard(0)), setting `start`.
bool holds_run(const tensor_piece& p, const tensor_view& v, int64_t& start) {
  if (p.flat) {
    start = p.offsets[0];
    return true;
  }
  for (size_t d = 1; d < v.shape.size(); ++d)
    if (p.view.shape[d] != v.shape[d]) return false;
  start = flat_index(p.offsets, v.strides);
  return true;
}

// Copies the elements of the plain view `piece`, placed at `offsets` in a tensor of `shape`, whose
// row-major index in the tensor lies in [begin, end) to `dst` (the tensor's element `begin`).
void copy_box_range(const tensor_view& piece, const std::vector<int64_t>& offsets, const std::vector<int64_t>& shape,
                    int64_t begin, int64_t end, uint8_t* dst) {
  const auto item = static_cast<int64_t>(itemsize(piece.type));
  const size_t nd = shape.size();
  if (nd == 0) {
    if (begin == 0 && end > 0) std::memcpy(dst, piece.data(), static_cast<size_t>(item));
    return;
  }
  const int64_t row = shape[nd - 1];
  const int64_t first = offsets[nd - 1], width = piece.shape[nd - 1], step = piece.strides[nd - 1];
  std::vector<int64_t> index(nd - 1);  // of the tensor's row r, in its outer dimensions
  int64_t rest = begin / row;
  for (size_t d = nd - 1; d-- > 0;) {
    index[d] = rest % shape[d];
    rest /= shape[d];
  }
  for (int64_t r = begin / row; r * row < end; ++r) {
    bool inside = true;
    int64_t from = 0;
    for (size_t d = 0; d + 1 < nd && inside; ++d) {
      const int64_t i = index[d] - offsets[d];
      inside = i >= 0 && i < piece.shape[d];
      from += i * piece.strides[d];
    }
    const int64_t lo = std::max(first, begin - r * row), hi = std::min(first + width, end - r * row);
    if (inside && lo < hi) {
      const uint8_t* src = piece.data() + (from + (lo - first) * step) * item;
      uint8_t* out = dst + (r * row + lo - begin) * item;
      if (step == 1 || hi - lo == 1) {
        std::memcpy(out, src, static_cast<size_t>((hi - lo) * item));
      } else {
        for (int64_t i = 0; i < hi - lo; ++i)
          std::memcpy(out + i * item, src + i * step * item, static_cast<size_t>(item));
      }
    }
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
}

// How many of the piece's elements come before the tensor's element `x` (0 to numel) in row-major order.
int64_t piece_elements_before(const tensor_piece& p, const std::vector<int64_t>& shape, int64_t x) {
  const int64_t n = p.view.numel();
  if (p.flat) return std::clamp<int64_t>(x - p.offsets[0], 0, n);
  int64_t total = 1;
  for (int64_t s : shape) total *= s;
  if (x >= total) return n;
  std::vector<int64_t> index(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    index[d] = x % shape[d];
    x /= shape[d];
  }
  int64_t count = 0, inner = n;
  for (size_t d = 0; d < shape.size(); ++d) {
    inner /= p.view.shape[d];
    const int64_t i = index[d] - p.offsets[d];
    count += std::clamp<int64_t>(i, 0, p.view.shape[d]) * inner;
    if (i < 0 || i >= p.view.shape[d]) break;
  }
  return count;
}

void release_piece(const tensor_view& v, int64_t first, int64_t count) {
  const uint64_t item = itemsize(v.type);
  release_pages(v, static_cast<uint64_t>(v.offset + first) * item, static_cast<uint64_t>(count) * item);
}

}  // namespace

std::string check_piece(dtype type, const std::vector<int64_t>& shape, const tensor_piece& p) {
  const tensor_view& v = p.view;
  if (v.pieces) return "is itself made of pieces";
  if (v.type != type) return fmt::format("holds {}, expected {}", dtype_name(v.type), dtype_name(type));
  if (v.shape.size() != v.strides.size())
    return fmt::format("has {} sizes but {} strides", v.shape.size(), v.strides.size());
  for (int64_t s : v.shape)
    if (s < 0) return fmt::format("has negative size {} in {}", s, shape_string(v.shape));
  if (p.flat) {
    if (v.shape.size() != 1 || p.offsets.size() != 1)
      return fmt::format("is placed flat with {} offsets and shape {}, expected one of each", p.offsets.size(),
                         shape_string(v.shape));
    uint64_t numel = 1;
    for (int64_t s : shape) {
      const auto n = s < 0 ? std::nullopt : checked_mul(numel, static_cast<uint64_t>(s));
      if (!n) return "lies in a tensor of invalid shape " + shape_string(shape);
      numel = *n;
    }
    if (p.offsets[0] < 0) return fmt::format("starts at negative element {}", p.offsets[0]);
    const auto end = checked_add(static_cast<uint64_t>(p.offsets[0]), static_cast<uint64_t>(v.shape[0]));
    if (!end || *end > numel)
      return fmt::format("ends at element {} of a tensor of {} elements ({})",
                         end ? std::to_string(*end) : std::string("2^64 and more"), numel, shape_string(shape));
    return {};
  }
  if (p.offsets.size() != shape.size() || v.shape.size() != shape.size())
    return fmt::format("has {} offsets and shape {}, expected {} of each for a tensor of shape {}", p.offsets.size(),
                       shape_string(v.shape), shape.size(), shape_string(shape));
  for (size_t d = 0; d < shape.size(); ++d) {
    if (p.offsets[d] < 0) return fmt::format("starts at negative offset {} in dimension {}", p.offsets[d], d);
    const auto end = checked_add(static_cast<uint64_t>(p.offsets[d]), static_cast<uint64_t>(v.shape[d]));
    if (!end || *end > static_cast<uint64_t>(shape[d]))
      return fmt::format("ends at {} in dimension {} of {}", end ? std::to_string(*end) : std::string("2^64 and more"),
                         d, shape_string(shape));
  }
  return {};
}

tensor_view make_pieced_view(dtype type, const std::vector<int64_t>& shape, std::vector<tensor_piece> pieces,
                             std::string storage_key) {
  tensor_view v;
  v.type = type;
  v.shape = shape;
  v.strides = contiguous_strides(shape);
  auto kept = std::make_shared<std::vector<tensor_piece>>();
  uint64_t elements = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string wrong = check_piece(type, shape, pieces[i]);
    if (!wrong.empty()) throw std::logic_error(fmt::format("piece {} of tensor '{}' {}", i, storage_key, wrong));
    const int64_t n = pieces[i].view.numel();
    elements += static_cast<uint64_t>(n);
    if (n > 0) kept->push_back(std::move(pieces[i]));
  }
  if (elements != static_cast<uint64_t>(v.numel()))
    throw std::logic_error(fmt::format("the pieces of tensor '{}' of shape {} hold {} elements, expected {}",
                                       storage_key, shape_string(shape), elements, v.numel()));
  v.storage_bytes = v.nbytes();
  v.storage_key = std::move(storage_key);
  v.pieces = kept;
  v.owner = kept;
  return v;
}

void gather_contiguous(const tensor_view& v, void* dst) {
  uint8_t* out = static_cast<uint8_t*>(dst);
  if (v.pieces) {
    const size_t item = itemsize(v.type);
    for (const tensor_piece& p : *v.pieces) {
      int64_t start = 0;
      if (holds_run(p, v, start))
        gather_contiguous(p.view, out + static_cast<size_t>(start) * item);
      else
        copy_rows(p.view, out + static_cast<size_t>(flat_index(p.offsets, v.strides)) * item, v.strides);
    }
    return;
  }
  if (v.numel() == 0) return;
  if (v.is_contiguous()) {
    std::memcpy(out, v.data(), v.nbytes());
    return;
  }
  copy_rows(v, out, contiguous_strides(v.shape));
}

void gather_range(const tensor_view& v, int64_t begin, int64_t count, void* dst) {
  if (count <= 0) return;
  uint8_t* out = static_cast<uint8_t*>(dst);
  const size_t item = itemsize(v.type);
  const int64_t end = begin + count;
  if (!v.pieces) {
    if (v.is_contiguous())
      std::memcpy(out, v.data() + static_cast<size_t>(begin) * item, static_cast<size_t>(count) * item);
    else
      copy_box_range(v, std::vector<int64_t>(v.shape.size(), 0), v.shape, begin, end, out);
    return;
  }
  for (const tensor_piece& p : *v.pieces) {
    int64_t first = 0;
    if (!holds_run(p, v, first)) {
      copy_box_range(p.view, p.offsets, v.shape, begin, end, out);
      continue;
    }
    const int64_t lo = std::max(begin, first), hi = std::min(end, first + p.view.numel());
    if (lo >= hi) continue;
    uint8_t* at = out + static_cast<size_t>(lo - begin) * item;
    if (p.view.is_contiguous()) {
      std::memcpy(at, p.view.data() + static_cast<size_t>(lo - first) * item, static_cast<size_t>(hi - lo) * item);
    } else if (p.flat) {
      tensor_view part = p.view;
      part.offset += (lo - first) * p.view.strides[0];
      part.shape = {hi - lo};
      gather_contiguous(part, at);
    } else {
      copy_box_range(p.view, p.offsets, v.shape, lo, hi, at);
    }
  }
}

const uint8_t* range_in_place(const tensor_view& v, int64_t begin, int64_t count) {
  const size_t item = itemsize(v.type);
  if (!v.pieces) return v.is_contiguous() ? v.data() + static_cast<size_t>(begin) * item : nullptr;
  for (const tensor_piece& p : *v.pieces) {
    int64_t first = 0;
    if (!holds_run(p, v, first) || begin < first || begin >= first + p.view.numel()) continue;
    if (begin + count > first + p.view.numel() || !p.view.is_contiguous()) return nullptr;
    return p.view.data() + static_cast<size_t>(begin - first) * item;
  }
  return nullptr;
}

const uint8_t* contiguous_data(const tensor_view& v, std::vector<uint8_t>& copy) {
  if (v.is_contiguous() && reinterpret_cast<uintptr_t>(v.data()) % itemsize(v.type) == 0) return v.data();
  copy.resize(v.nbytes());
  gather_contiguous(v, copy.data());
  return copy.data();
}

void release_pages(const tensor_view& v) {
  if (v.pieces) {
    for (const tensor_piece& p : *v.pieces) release_piece(p.view, 0, element_span(p.view));
    return;
  }
  if (v.mapping == nullptr || v.storage_bytes == 0) return;
  const uint64_t start = static_cast<uint64_t>(v.storage - v.mapping->data());
  v.mapping->release_pages(start, start + v.storage_bytes);
  v.mapping->throw_if_faulted();
}

void release_pages(const tensor_view& v, uint64_t offset, uint64_t length) {
  if (v.pieces) {
    const uint64_t item = itemsize(v.type);
    const auto begin = static_cast<int64_t>(std::min(offset, v.storage_bytes) / item);
    const auto end = static_cast<int64_t>(std::min(offset + std::min(length, v.storage_bytes), v.storage_bytes) / item);
    for (const tensor_piece& p : *v.pieces) {
      // A contiguous piece's elements in the range are one run of its bytes.
      const int64_t lo = piece_elements_before(p, v.shape, begin), hi = piece_elements_before(p, v.shape, end);
      if (lo < hi && p.view.is_contiguous())
        release_piece(p.view, lo, hi - lo);
      else if (lo == 0 && hi == p.view.numel())
        release_piece(p.view, 0, element_span(p.view));
    }
    return;
  }
  if (v.mapping == nullptr || offset >= v.storage_bytes) return;
  const uint64_t start = static_cast<uint64_t>(v.storage - v.mapping->data()) + offset;
  v.mapping->release_pages(start, start + std::min(length, v.storage_bytes - offset));
  v.mapping->throw_if_faulted();
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string check_view_bounds(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t offset,
                              uint64_t storage_numel) {
  if (shape.size() != strides.size()) return fmt::format("has {} sizes but {} strides", shape.size(), strides.size());
  if (offset < 0) return "has negative storage offset " + std::to_string(offset);
  uint64_t numel = 1;
  uint64_t last = static_cast<uint64_t>(offset);  // highest element index reached
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) return fmt::format("has negative size {} in {}", shape[i], shape_string(shape));
    if (strides[i] < 0) return "has negative stride " + std::to_string(strides[i]);
    auto n = checked_mul(numel, static_cast<uint64_t>(shape[i]));
    if (!n || *n > (uint64_t{1} << 62)) return "has an element count that overflows: " + shape_string(shape);
    numel = *n;
  }
  if (numel == 0) return {};
  for (size_t i = 0; i < shape.size(); ++i) {
    auto reach = checked_mul(static_cast<uint64_t>(shape[i] - 1), static_cast<uint64_t>(strides[i]));
    auto sum = reach ? checked_add(last, *reach) : std::nullopt;
    if (!sum) return "has sizes and strides whose extent overflows";
    last = *sum;
  }
  if (last >= storage_numel)
    return fmt::format("needs storage elements up to {} but the storage has {}", last + 1, storage_numel);
  return {};
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace swavg
