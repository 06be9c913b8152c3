// Views (tensor/tensor_view.h): gathering plain and strided views, and pieced views (DCP chunks,
// ZeRO-3 slices) assembled from their pieces: Shard(0), Shard(1), uneven, 3-d, a strided piece,
// flat pieces, the bounds of a piece at their exact edges, and pages released through the pieces.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <algorithm>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "support.h"
#include "tensor/tensor_view.h"
#include "util/error.h"
#include "util/mapped_file.h"

using namespace swavg;

namespace {

// A plain float32 view over `values` (kept alive by the view).
tensor_view floats(std::vector<float> values, std::vector<int64_t> shape, std::vector<int64_t> strides = {},
                   int64_t offset = 0) {
  auto data = std::make_shared<std::vector<float>>(std::move(values));
  tensor_view v;
  v.type = dtype::float32;
  v.shape = std::move(shape);
  v.strides = strides.empty() ? contiguous_strides(v.shape) : std::move(strides);
  v.offset = offset;
  v.storage = reinterpret_cast<const uint8_t*>(data->data());
  v.storage_bytes = data->size() * sizeof(float);
  v.owner = data;
  return v;
}

// A float32 view over a file at `path` of `count` copies of `value`, mapped (the view keeps the
// mapping alive), with this shape and these strides.
tensor_view mapped_floats(const std::string& path, int64_t count, float value, std::vector<int64_t> shape,
                          std::vector<int64_t> strides) {
  {
    const std::vector<float> values(static_cast<size_t>(count), value);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(count * 4));
  }
  const std::shared_ptr<const mapped_file> file = mapped_file::open(path);
  tensor_view v;
  v.type = dtype::float32;
  v.shape = std::move(shape);
  v.strides = std::move(strides);
  v.storage = file->data();
  v.storage_bytes = file->size();
  v.owner = file;
  v.mapping = file.get();
  return v;
}

// The full tensor's values 0, 1, 2, ... in row-major order, and the box of it at `offsets` of
// `sizes` as a contiguous view of its own.
std::vector<float> iota(int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<float>(i);
  return out;
}

tensor_piece box(const std::vector<int64_t>& full, const std::vector<int64_t>& offsets,
                 const std::vector<int64_t>& sizes) {
  const std::vector<int64_t> strides = contiguous_strides(full);
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  std::vector<float> values;
  std::vector<int64_t> index(sizes.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t at = 0;
    for (size_t d = 0; d < sizes.size(); ++d) at += (offsets[d] + index[d]) * strides[d];
    values.push_back(static_cast<float>(at));
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < sizes[d]) break;
      index[d] = 0;
    }
  }
  return tensor_piece{floats(values, sizes), offsets, false};
}

std::vector<float> gathered(const tensor_view& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()), -1.0f);
  gather_contiguous(v, out.data());
  return out;
}

// The view gathered in slices of `slice` elements (gather_range), end to end.
std::vector<float> sliced(const tensor_view& v, int64_t slice) {
  std::vector<float> out;
  for (int64_t begin = 0; begin < v.numel(); begin += slice) {
    const int64_t n = std::min(slice, v.numel() - begin);
    std::vector<float> part(static_cast<size_t>(n), -1.0f);
    gather_range(v, begin, n, part.data());
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

// Every slicing gives the same elements as gathering the whole view.
void check_slices(const tensor_view& v, const std::vector<float>& want) {
  for (int64_t slice : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{13}, v.numel() - 1, v.numel()}) {
    if (slice < 1) continue;
    INFO("slices of " << slice);
    CHECK(sliced(v, slice) == want);
  }
}

}  // namespace

TEST_CASE("a strided view gathers in row-major order", "[tensor_view]") {
  // the transpose of a 2 x 3 tensor [[0, 1, 2], [3, 4, 5]]
  const tensor_view t = floats({0, 1, 2, 3, 4, 5}, {3, 2}, {1, 3});
  CHECK_FALSE(t.is_contiguous());
  CHECK(gathered(t) == std::vector<float>{0, 3, 1, 4, 2, 5});
  check_slices(t, {0, 3, 1, 4, 2, 5});
  const tensor_view shifted = floats({9, 0, 1, 2, 3}, {2, 2}, {2, 1}, 1);
  CHECK(shifted.is_contiguous());
  CHECK(gathered(shifted) == std::vector<float>{0, 1, 2, 3});
}

TEST_CASE("pieced views assemble Shard(0), Shard(1), uneven and 3-d chunks", "[tensor_view]") {
  struct layout {
    std::vector<int64_t> shape;
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> chunks;  // offsets, sizes
  };
  const std::vector<layout> layouts = {
      {{7, 5}, {{{0, 0}, {4, 5}}, {{4, 0}, {3, 5}}}},                                         // Shard(0), uneven
      {{7, 5}, {{{0, 0}, {2, 5}}, {{2, 0}, {2, 5}}, {{4, 0}, {2, 5}}, {{6, 0}, {1, 5}}}},     // 4 ranks
      {{6, 10}, {{{0, 0}, {6, 3}}, {{0, 3}, {6, 3}}, {{0, 6}, {6, 4}}}},                      // Shard(1), uneven
      {{3, 4, 5}, {{{0, 0, 0}, {3, 2, 5}}, {{0, 2, 0}, {3, 2, 5}}}},                          // 3-d, dimension 1
      {{3, 4, 5}, {{{0, 0, 0}, {3, 4, 2}}, {{0, 0, 2}, {3, 4, 3}}}},                          // 3-d, dimension 2
      {{3, 4, 5}, {{{0, 0, 0}, {2, 4, 5}}, {{2, 0, 0}, {1, 2, 5}}, {{2, 2, 0}, {1, 2, 5}}}},  // 2-d mesh
  };
  for (const auto& l : layouts)
    for (bool reversed : {false, true}) {
      // Listed out of order too: a piece that wrote one row past its own would then overwrite a row
      // another piece had already written, instead of being overwritten by it.
      INFO(shape_string(l.shape) << " in " << l.chunks.size() << " pieces" << (reversed ? ", listed backwards" : ""));
      std::vector<tensor_piece> pieces;
      for (const auto& [offsets, sizes] : l.chunks) pieces.push_back(box(l.shape, offsets, sizes));
      if (reversed) std::reverse(pieces.begin(), pieces.end());
      const tensor_view v = make_pieced_view(dtype::float32, l.shape, pieces, "t");
      CHECK_FALSE(v.is_contiguous());
      CHECK(v.data() == nullptr);
      CHECK(v.storage_bytes == v.nbytes());
      CHECK(v.strides == contiguous_strides(l.shape));
      CHECK(gathered(v) == iota(v.numel()));
      check_slices(v, iota(v.numel()));
      std::vector<uint8_t> copy;
      const uint8_t* data = contiguous_data(v, copy);
      CHECK(data == copy.data());
      CHECK(copy.size() == v.nbytes());
      const std::string bytes = test::row_major_bytes(v);
      CHECK(bytes == std::string(reinterpret_cast<const char*>(copy.data()), copy.size()));
    }
}

TEST_CASE("a strided piece, an empty piece and a 0-d tensor", "[tensor_view]") {
  // rows 2..3 of a 4 x 3 tensor (values 6..11), saved transposed: a 3 x 2 storage seen as 2 x 3
  const tensor_piece strided{floats({6, 9, 7, 10, 8, 11}, {2, 3}, {1, 2}), {2, 0}, false};
  const tensor_piece empty{floats({}, {0, 3}), {4, 0}, false};
  const tensor_view v = make_pieced_view(dtype::float32, {4, 3}, {box({4, 3}, {0, 0}, {2, 3}), strided, empty}, "t");
  CHECK(v.pieces->size() == 2);  // the empty one is not kept
  CHECK(gathered(v) == iota(12));
  check_slices(v, iota(12));

  // columns 2..3 of a 3 x 4 tensor, saved transposed: a strided piece of part of each row
  const tensor_piece columns{floats({2, 6, 10, 3, 7, 11}, {3, 2}, {1, 3}), {0, 2}, false};
  const tensor_view w = make_pieced_view(dtype::float32, {3, 4}, {box({3, 4}, {0, 0}, {3, 2}), columns}, "w");
  CHECK(gathered(w) == iota(12));
  check_slices(w, iota(12));

  const tensor_view scalar = make_pieced_view(dtype::float32, {}, {tensor_piece{floats({4.5f}, {}), {}, false}}, "s");
  CHECK(gathered(scalar) == std::vector<float>{4.5f});
  CHECK(sliced(scalar, 1) == std::vector<float>{4.5f});
}

TEST_CASE("flat pieces: ZeRO-3 slices of flat partitions", "[tensor_view]") {
  // a 3 x 5 parameter: 8 elements at the start of rank 0's partition, 7 from element 2 of rank 1's
  const tensor_view rank0 = floats({0, 1, 2, 3, 4, 5, 6, 7, 99}, {9});
  const tensor_view rank1 = floats({99, 99, 8, 9, 10, 11, 12, 13, 14, 99}, {10});
  tensor_piece a{rank0, {0}, true}, b{rank1, {8}, true};
  a.view.shape = {8};
  b.view.shape = {7};
  b.view.offset = 2;
  const tensor_view v = make_pieced_view(dtype::float32, {3, 5}, {a, b}, "zero3/w");
  CHECK(gathered(v) == iota(15));
  check_slices(v, iota(15));
  // a flat piece may be strided (every other element)
  tensor_piece c{floats({8, -1, 9, -1, 10, -1, 11, -1, 12, -1, 13, -1, 14}, {7}, {2}), {8}, true};
  const tensor_view w = make_pieced_view(dtype::float32, {3, 5}, {a, c}, "zero3/w");
  CHECK(gathered(w) == iota(15));
  check_slices(w, iota(15));
}

TEST_CASE("range_in_place: a slice read where it lies, only when one contiguous piece holds it", "[tensor_view]") {
  // Shard(0) of a 7 x 5 tensor in rows 0..3 and 4..6: elements 0..19 and 20..34.
  const tensor_piece top = box({7, 5}, {0, 0}, {4, 5}), bottom = box({7, 5}, {4, 0}, {3, 5});
  const tensor_view rows = make_pieced_view(dtype::float32, {7, 5}, {top, bottom}, "rows");
  CHECK(range_in_place(rows, 0, 20) == top.view.data());              // the whole first piece
  CHECK(range_in_place(rows, 19, 1) == top.view.data() + 19 * 4);     // its last element
  CHECK(range_in_place(rows, 19, 2) == nullptr);                      // one past it: two pieces
  CHECK(range_in_place(rows, 20, 15) == bottom.view.data());          // the second piece
  CHECK(range_in_place(rows, 34, 1) == bottom.view.data() + 14 * 4);  // the last element
  // Shard(1): no piece holds a run of the tensor's elements.
  const tensor_view cols =
      make_pieced_view(dtype::float32, {6, 10}, {box({6, 10}, {0, 0}, {6, 5}), box({6, 10}, {0, 5}, {6, 5})}, "cols");
  CHECK(range_in_place(cols, 0, 1) == nullptr);
  // A flat piece that is strided, and a plain view: strided, contiguous, and misaligned (in place
  // all the same: the kernels load unaligned inputs).
  tensor_piece strided{floats({0, -1, 1, -1, 2}, {3}, {2}), {0}, true};
  const tensor_view flat = make_pieced_view(dtype::float32, {3}, {strided}, "flat");
  CHECK(range_in_place(flat, 0, 1) == nullptr);
  const tensor_view transposed = floats({0, 1, 2, 3, 4, 5}, {3, 2}, {1, 3});
  CHECK(range_in_place(transposed, 0, 1) == nullptr);
  const tensor_view plain = floats({0, 1, 2, 3}, {4});
  CHECK(range_in_place(plain, 1, 3) == plain.data() + 4);
  tensor_view odd = plain;
  odd.storage += 1;
  odd.shape = {3};
  CHECK(range_in_place(odd, 0, 3) == odd.storage);
}

TEST_CASE("a piece's bounds, at their exact edges", "[tensor_view]") {
  const std::vector<int64_t> shape{7, 5};
  CHECK(check_piece(dtype::float32, shape, box(shape, {4, 0}, {3, 5})).empty());  // ends at 7: last valid
  tensor_piece past = box(shape, {4, 0}, {3, 5});
  past.offsets = {5, 0};
  CHECK(check_piece(dtype::float32, shape, past) == "ends at 8 in dimension 0 of [7, 5]");
  past.offsets = {4, 1};
  CHECK(check_piece(dtype::float32, shape, past) == "ends at 6 in dimension 1 of [7, 5]");
  past.offsets = {-1, 0};
  CHECK(check_piece(dtype::float32, shape, past) == "starts at negative offset -1 in dimension 0");
  past.offsets = {4};
  CHECK(check_piece(dtype::float32, shape, past) ==
        "has 1 offsets and shape [3, 5], expected 2 of each for a tensor of shape [7, 5]");
  CHECK(check_piece(dtype::float64, shape, box(shape, {4, 0}, {3, 5})) == "holds float32, expected float64");
  // an empty piece at the end of a dimension (an uneven shard's last rank) fits
  CHECK(check_piece(dtype::float32, shape, tensor_piece{floats({}, {0, 5}), {7, 0}, false}).empty());
  CHECK(check_piece(dtype::float32, shape, tensor_piece{floats({}, {0, 5}), {8, 0}, false}) ==
        "ends at 8 in dimension 0 of [7, 5]");

  const tensor_view seven = floats({0, 1, 2, 3, 4, 5, 6}, {7});
  CHECK(check_piece(dtype::float32, shape, tensor_piece{seven, {28}, true}).empty());  // ends at 35: last valid
  CHECK(check_piece(dtype::float32, shape, tensor_piece{seven, {29}, true}) ==
        "ends at element 36 of a tensor of 35 elements ([7, 5])");
  CHECK(check_piece(dtype::float32, shape, tensor_piece{seven, {-1}, true}) == "starts at negative element -1");
  CHECK(check_piece(dtype::float32, shape, tensor_piece{seven, {0, 0}, true}) ==
        "is placed flat with 2 offsets and shape [7], expected one of each");

  const tensor_view pieced = make_pieced_view(dtype::float32, {7}, {tensor_piece{seven, {0}, true}}, "p");
  CHECK(check_piece(dtype::float32, {7}, tensor_piece{pieced, {0}, true}) == "is itself made of pieces");
}

TEST_CASE("make_pieced_view refuses pieces that do not add up", "[tensor_view]") {
  const tensor_view seven = floats({0, 1, 2, 3, 4, 5, 6}, {7});
  tensor_view six = seven;
  six.shape = {6};
  CHECK(make_pieced_view(dtype::float32, {2, 7}, {{seven, {0}, true}, {seven, {7}, true}}, "p").numel() == 14);
  CHECK_THROWS_AS(make_pieced_view(dtype::float32, {2, 7}, {{seven, {0}, true}, {six, {7}, true}}, "p"),
                  std::logic_error);
  CHECK_THROWS_AS(make_pieced_view(dtype::float32, {2, 7}, {{seven, {0}, true}, {seven, {8}, true}}, "p"),
                  std::logic_error);
}

TEST_CASE("release_pages reaches the file of every piece, and only of the pieces in its range",
          "[tensor_view][sigbus]") {
  // A [2, n] tensor: row 0 placed as a box from file rank0, row 1 flat from file rank1.
  test::temp_dir tmp;
  const int64_t n = ::sysconf(_SC_PAGESIZE);  // floats per row: 4 pages of each file
  const std::vector<tensor_piece> pieces = {
      tensor_piece{mapped_floats(tmp / "rank0", n, 1.0f, {1, n}, {n, 1}), {0, 0}, false},
      tensor_piece{mapped_floats(tmp / "rank1", n, 2.0f, {n}, {1}), {n}, true}};
  const tensor_view v = make_pieced_view(dtype::float32, {2, n}, pieces, "t");
  std::vector<float> out = gathered(v);
  CHECK(out.front() == 1.0f);
  CHECK(out.back() == 2.0f);
  CHECK_NOTHROW(release_pages(v));

  REQUIRE(::truncate((tmp / "rank1").c_str(), 0) == 0);
  out = gathered(v);  // the guard reads zeros from the truncated file and flags its mapping
  CHECK(out.front() == 1.0f);
  CHECK(out.back() == 0.0f);
  // row 0 is rank0's alone: its last element is the last one that leaves rank1 untouched
  CHECK_NOTHROW(release_pages(v, 0, static_cast<uint64_t>(n) * 4));
  CHECK_NOTHROW(release_pages(v, 8, static_cast<uint64_t>(n) * 4 - 8));
  const std::string path1 = tmp / "rank1";
  CHECK(test::error_of([&] { release_pages(v, 0, static_cast<uint64_t>(n) * 4 + 4); }).find(path1) == 0);
  CHECK(test::error_of([&] { release_pages(v, static_cast<uint64_t>(n) * 8 - 4, 4); }).find(path1) == 0);
  const std::string message = test::error_of([&] { release_pages(v); });
  CHECK(message.find(path1) == 0);
  CHECK(message.find("changed while being read") != std::string::npos);
}

TEST_CASE("release_pages releases a strided piece only when the range holds all of it", "[tensor_view][sigbus]") {
  // A [2, n] tensor: row 0 contiguous from file rank0, row 1 every other element of file rank1.
  test::temp_dir tmp;
  const int64_t n = ::sysconf(_SC_PAGESIZE);
  const std::vector<tensor_piece> pieces = {
      tensor_piece{mapped_floats(tmp / "rank0", n, 1.0f, {1, n}, {n, 1}), {0, 0}, false},
      tensor_piece{mapped_floats(tmp / "rank1", 2 * n, 2.0f, {1, n}, {2 * n, 2}), {1, 0}, false}};
  const tensor_view v = make_pieced_view(dtype::float32, {2, n}, pieces, "t");
  REQUIRE_FALSE(v.pieces->back().view.is_contiguous());
  REQUIRE(::truncate((tmp / "rank1").c_str(), 0) == 0);
  CHECK(gathered(v).back() == 0.0f);  // the guard reads zeros from the truncated file and flags its mapping
  const uint64_t row = static_cast<uint64_t>(n) * 4;
  const std::string path1 = tmp / "rank1";
  CHECK_NOTHROW(release_pages(v, 0, row));            // row 0 alone: rank1 untouched
  CHECK_NOTHROW(release_pages(v, row + 4, row - 4));  // part of row 1: a strided piece is not one run, kept
  CHECK_NOTHROW(release_pages(v, row, row - 4));
  CHECK(test::error_of([&] { release_pages(v, row, row); }).find(path1) == 0);  // all of row 1: released
  CHECK(test::error_of([&] { release_pages(v, 0, 2 * row); }).find(path1) == 0);
}
