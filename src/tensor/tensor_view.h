/*
 * A tensor as a file describes it: element type, shape, strides and storage offset (in elements),
 * over a storage that is a byte range owned by something kept alive through `owner` (usually the
 * memory-mapped file). Nothing is copied or read when a view is made; readers validate that every
 * element the view can reach lies inside its storage before they hand a view out.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace swavg {

class mapped_file;

struct tensor_view {
  dtype type = dtype::float32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements
  int64_t offset = 0;            // storage offset, in elements
  const uint8_t* storage = nullptr;
  uint64_t storage_bytes = 0;
  std::string storage_key;  // identifies the storage within its file: equal keys share bytes
  std::shared_ptr<const void> owner;
  // The file mapping the storage lies in (kept alive by owner), if any: its pages may be dropped.
  const mapped_file* mapping = nullptr;

  int64_t numel() const;
  uint64_t nbytes() const;  // numel * itemsize
  bool is_contiguous() const;
  // Start of the first element (storage + offset * itemsize).
  const uint8_t* data() const;
};

// Copies the view's elements in row-major order to `dst` (nbytes() bytes), following its strides.
void gather_contiguous(const tensor_view& v, void* dst);
// The view's elements, contiguous and aligned to their size: the view's own bytes when they already
// are, else a gathered copy held in `copy`.
const uint8_t* contiguous_data(const tensor_view& v, std::vector<uint8_t>& copy);

// Drops the view's storage pages from this process's memory once they are no longer needed, as
// mapped_file::release_pages does (with the pages mapped around them), then throws io_error if the
// file shrank while mapped (mapped_file::throw_if_faulted). No-op without a mapping.
void release_pages(const tensor_view& v);
// The same for the `length` bytes of the storage starting `offset` bytes in.
void release_pages(const tensor_view& v, uint64_t offset, uint64_t length);

// Row-major strides for `shape`.
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

// Checks that a view with these sizes, strides and offset stays inside a storage of
// `storage_numel` elements: no negative values, no overflow. Returns an empty string when it fits,
// else what is wrong ("needs elements up to 120 but the storage has 100").
std::string check_view_bounds(const std::vector<int64_t>& shape, const std::vector<int64_t>& strides, int64_t offset,
                              uint64_t storage_numel);

// "[3, 64, 7, 7]"
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace swavg
