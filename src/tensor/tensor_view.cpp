#include "tensor/tensor_view.h"

#include <fmt/format.h>

#include <cstring>

#include <algorithm>

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
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 1) continue;
    if (strides[i] != expected) return numel() == 0;
    expected *= shape[i];
  }
  return true;
}

const uint8_t* tensor_view::data() const { return storage + static_cast<uint64_t>(offset) * itemsize(type); }

void gather_contiguous(const tensor_view& v, void* dst) {
  const size_t item = itemsize(v.type);
  const int64_t n = v.numel();
  if (n == 0) return;
  const uint8_t* base = v.storage + static_cast<size_t>(v.offset) * item;
  uint8_t* out = static_cast<uint8_t*>(dst);
  if (v.is_contiguous()) {
    std::memcpy(out, base, static_cast<size_t>(n) * item);
    return;
  }
  // Rows along the last dimension; the index of the outer dimensions counts like an odometer.
  const size_t dims = v.shape.size();
  const int64_t row = dims == 0 ? 1 : v.shape[dims - 1];
  const int64_t step = dims == 0 ? 0 : v.strides[dims - 1];
  std::vector<int64_t> index(dims == 0 ? 0 : dims - 1, 0);
  for (int64_t done = 0; done < n; done += row) {
    int64_t start = 0;
    for (size_t d = 0; d + 1 < dims; ++d) start += index[d] * v.strides[d];
    const uint8_t* src = base + start * static_cast<int64_t>(item);
    if (step == 1) {
      std::memcpy(out, src, static_cast<size_t>(row) * item);
      out += static_cast<size_t>(row) * item;
    } else {
      for (int64_t i = 0; i < row; ++i, out += item)
        std::memcpy(out, src + i * step * static_cast<int64_t>(item), item);
    }
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < v.shape[d]) break;
      index[d] = 0;
    }
  }
}

const uint8_t* contiguous_data(const tensor_view& v, std::vector<uint8_t>& copy) {
  if (v.is_contiguous() && reinterpret_cast<uintptr_t>(v.data()) % itemsize(v.type) == 0) return v.data();
  copy.resize(v.nbytes());
  gather_contiguous(v, copy.data());
  return copy.data();
}

void release_pages(const tensor_view& v) {
  if (v.mapping == nullptr || v.storage_bytes == 0) return;
  const uint64_t start = static_cast<uint64_t>(v.storage - v.mapping->data());
  v.mapping->release_pages(start, start + v.storage_bytes);
  v.mapping->throw_if_faulted();
}

void release_pages(const tensor_view& v, uint64_t offset, uint64_t length) {
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
