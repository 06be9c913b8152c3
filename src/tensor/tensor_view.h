/*
 * A tensor as a file describes it: element type, shape, strides and storage offset (in elements),
 * over a storage that is a byte range owned by something kept alive through `owner` (usually the
 * memory-mapped file). Nothing is copied or read when a view is made; readers validate that every
 * element the view can reach lies inside its storage before they hand a view out.
 *
 * A tensor saved in pieces (the chunks of a DCP checkpoint, the ranks' slices of a ZeRO-3 parameter)
 * is a pieced view: a list of plain views, each placed in the tensor, and no storage of its own. Its
 * bytes are assembled only when it is read (gather_contiguous, contiguous_data), into the reader's
 * buffer, so loading such a checkpoint costs no memory per tensor.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace swavg {

class mapped_file;
struct tensor_piece;

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
  // Set for a pieced view (make_pieced_view): the elements lie in these pieces; storage and mapping
  // are null, offset 0, strides row-major and storage_bytes nbytes(); owner keeps the pieces alive.
  std::shared_ptr<const std::vector<tensor_piece>> pieces;

  int64_t numel() const;
  uint64_t nbytes() const;  // numel * itemsize
  // The elements lie in row-major order from data() on (never for a pieced view).
  bool is_contiguous() const;
  // Start of the first element (storage + offset * itemsize); null for a pieced view.
  const uint8_t* data() const;
};

// One piece of a pieced view: a plain view of the piece's elements and where they go.
struct tensor_piece {
  tensor_view view;
  // Box placement: as many offsets as the tensor has dimensions, the index of the piece's first
  // element (the piece's shape has as many dimensions). Flat placement (`flat`, a 1-d piece): one
  // offset, the row-major index in the tensor of the piece's first element.
  std::vector<int64_t> offsets;
  bool flat = false;
};

// Checks that `p` is a plain view of `type` that fits inside a tensor of `shape`: empty when it
// does, else what is wrong ("ends at 65 in dimension 0 of [64, 8]").
std::string check_piece(dtype type, const std::vector<int64_t>& shape, const tensor_piece& p);
// A pieced view of `pieces`, which must tile the tensor (no overlap, no hole: the readers check
// that); throws std::logic_error for a piece check_piece refuses or elements that do not add up.
tensor_view make_pieced_view(dtype type, const std::vector<int64_t>& shape, std::vector<tensor_piece> pieces,
                             std::string storage_key);

// Copies the view's elements in row-major order to `dst` (nbytes() bytes), following its strides
// (or assembling its pieces).
void gather_contiguous(const tensor_view& v, void* dst);
// Copies elements [begin, begin + count) of the view, in row-major order, to `dst` (count elements),
// reading only the bytes behind them: a slice of a pieced view from the pieces it lies in.
void gather_range(const tensor_view& v, int64_t begin, int64_t count, void* dst);
// Elements [begin, begin + count) of the view where they already lie in row-major order: in a
// contiguous view, or in one contiguous piece that holds them all. Null when they do not
// (gather_range copies them then). Not necessarily aligned to the element size: a DCP chunk lies
// wherever torch wrote its archive inside the .distcp.
const uint8_t* range_in_place(const tensor_view& v, int64_t begin, int64_t count);
// The view's elements, contiguous and aligned to their size: the view's own bytes when they already
// are, else a gathered copy held in `copy`.
const uint8_t* contiguous_data(const tensor_view& v, std::vector<uint8_t>& copy);

// Drops the view's storage pages from this process's memory once they are no longer needed, as
// mapped_file::release_pages does (with the pages mapped around them), then throws io_error if the
// file shrank while mapped (mapped_file::throw_if_faulted). No-op without a mapping. For a pieced
// view, the bytes each piece reaches.
void release_pages(const tensor_view& v);
// The same for the `length` bytes of the storage starting `offset` bytes in; for a pieced view
// (whose storage is the tensor in row-major order) the pieces that lie wholly in that range, and
// the part of each flat piece that does.
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
