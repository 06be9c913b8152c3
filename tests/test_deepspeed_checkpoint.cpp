// The ZeRO-3 reconstruction arithmetic of formats/deepspeed/deepspeed_checkpoint.h at its exact edges. The
// files themselves (written by DeepSpeed) are checked by tests/cli/test_deepspeed.py.
#include <catch2/catch.hpp>

#include <cstdint>
#include <ctime>

#include "formats/deepspeed/deepspeed_checkpoint.h"
#include "util/error.h"

using namespace swavg;

namespace {

std::vector<zero3_slice> slices_of(const std::vector<uint64_t>& numels, const std::vector<uint64_t>& groups,
                                   uint64_t world, size_t which) {
  const auto plan = plan_zero3(numels, std::vector<std::string>(numels.size(), "p"), groups, world, "f");
  return zero3_slices(plan.at(which), zero3_group_starts(groups), world);
}

bool same(const zero3_slice& s, size_t rank, size_t group, uint64_t offset, uint64_t count) {
  return s.rank == rank && s.group == group && s.offset == offset && s.count == count;
}

}  // namespace

TEST_CASE("zero3_numel: the product of the sizes, at most 2^63 - 1", "[deepspeed]") {
  CHECK(zero3_numel({}, "p") == 1);
  CHECK(zero3_numel({7, 0, 5}, "p") == 0);
  CHECK(zero3_numel({9223372036854775807}, "p") == 9223372036854775807ull);
  CHECK(zero3_numel({4611686018427387903, 2}, "p") == 9223372036854775806ull);
  CHECK_THROWS_AS(zero3_numel({4611686018427387904, 2}, "p"), input_error);  // 2^63
  CHECK(zero3_numel({3037000499, 3037000499}, "p") == 9223372030926249001ull);
  CHECK_THROWS_AS(zero3_numel({3037000500, 3037000500}, "p"), input_error);
  CHECK_THROWS_AS(zero3_numel({9223372036854775807, 9223372036854775807}, "p"), input_error);  // past 2^64
  CHECK_THROWS_AS(zero3_numel({3, -1}, "p"), input_error);
}

TEST_CASE("plan_zero3: ceil(numel / world) per rank, the partitions exactly full", "[deepspeed]") {
  // 35, 15 and 3 elements on 2 ranks take 18 + 8 + 2 = 28 elements of each rank's partition.
  const auto plan = plan_zero3({35, 15, 3}, {"a", "b", "c"}, {28}, 2, "f");
  REQUIRE(plan.size() == 3);
  CHECK(plan[0].partition_numel == 18);
  CHECK(plan[1].partition_offset == 18);
  CHECK(plan[1].partition_numel == 8);
  CHECK(plan[2].partition_offset == 26);
  CHECK(plan[2].partition_numel == 2);
  CHECK(plan_zero3({35, 15, 3}, {"a", "b", "c"}, {18, 10}, 2, "f").size() == 3);
  CHECK_THROWS_AS(plan_zero3({35, 15, 3}, {"a", "b", "c"}, {27}, 2, "f"), input_error);  // c runs past
  CHECK_THROWS_AS(plan_zero3({35, 15, 3}, {"a", "b", "c"}, {29}, 2, "f"), input_error);  // one left over
  CHECK(plan_zero3({36}, {"a"}, {18}, 2, "f")[0].partition_numel == 18);
  CHECK(plan_zero3({37}, {"a"}, {19}, 2, "f")[0].partition_numel == 19);
  CHECK_THROWS_AS(plan_zero3({37}, {"a"}, {18}, 2, "f"), input_error);
  CHECK(plan_zero3({0}, {"a"}, {0}, 4, "f")[0].partition_numel == 0);
  CHECK_THROWS_AS(plan_zero3({1}, {"a"}, {1}, 0, "f"), input_error);
  CHECK_THROWS_AS(plan_zero3({1}, {"a"}, {18446744073709551615ull, 1}, 1, "f"), input_error);
  CHECK_THROWS_AS(plan_zero3({18446744073709551615ull, 1}, {"a", "b"}, {18446744073709551615ull}, 1, "f"), input_error);
  try {
    plan_zero3({35, 15, 3}, {"a", "b", "c"}, {27}, 2, "optim.pt");
    FAIL("no error");
  } catch (const input_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("optim.pt") && Catch::Contains("'c'"));
  }
}

TEST_CASE("zero3_slices: rank by rank, the padding cut off the last", "[deepspeed]") {
  auto s = slices_of({35, 15, 3}, {28}, 2, 0);
  REQUIRE(s.size() == 2);
  CHECK(same(s[0], 0, 0, 0, 18));
  CHECK(same(s[1], 1, 0, 0, 17));
  s = slices_of({35, 15, 3}, {18, 10}, 2, 1);
  REQUIRE(s.size() == 2);
  CHECK(same(s[0], 0, 1, 0, 8));
  CHECK(same(s[1], 1, 1, 0, 7));
  s = slices_of({35, 15, 3}, {18, 10}, 2, 2);
  REQUIRE(s.size() == 2);
  CHECK(same(s[0], 0, 1, 8, 2));
  CHECK(same(s[1], 1, 1, 8, 1));
  // A parameter across two groups, as zero_to_fp32's GatheredTensor allows.
  s = slices_of({35, 15, 3}, {10, 18}, 2, 0);
  REQUIRE(s.size() == 4);
  CHECK(same(s[0], 0, 0, 0, 10));
  CHECK(same(s[1], 0, 1, 0, 8));
  CHECK(same(s[2], 1, 0, 0, 10));
  CHECK(same(s[3], 1, 1, 0, 7));
  // 3 elements on 4 ranks: one each on ranks 0-2, rank 3 holds padding only.
  s = slices_of({3}, {1}, 4, 0);
  REQUIRE(s.size() == 3);
  CHECK(same(s[2], 2, 0, 0, 1));
  CHECK(slices_of({0, 4}, {1}, 4, 0).empty());
  s = slices_of({5}, {5}, 1, 0);
  REQUIRE(s.size() == 1);
  CHECK(same(s[0], 0, 0, 0, 5));
}

TEST_CASE("zero3_slices: the group found by binary search, empty groups skipped", "[deepspeed]") {
  // groups of 0, 10, 0, 18 elements: the parameters start in groups 1 and 3
  auto s = slices_of({35, 15, 3}, {0, 10, 0, 18}, 2, 0);
  REQUIRE(s.size() == 4);
  CHECK(same(s[0], 0, 1, 0, 10));
  CHECK(same(s[1], 0, 3, 0, 8));
  s = slices_of({35, 15, 3}, {0, 10, 0, 18}, 2, 2);
  REQUIRE(s.size() == 2);
  CHECK(same(s[0], 0, 3, 16, 2));
  CHECK(same(s[1], 1, 3, 16, 1));
  CHECK(zero3_group_starts({}) == std::vector<uint64_t>{0});
  CHECK(zero3_group_starts({0, 10, 0, 18}) == std::vector<uint64_t>{0, 0, 10, 10, 28});
}

TEST_CASE("zero3_slices: 120,000 groups of one parameter each in linear time", "[deepspeed]") {
  // A ZeRO-3 folder with a group per parameter: each parameter's group is found by binary search
  // (scanning the groups from the first for each took 13.6 s at this size). Bounded in CPU time.
  const size_t n = 120'000;
  const std::vector<uint64_t> groups(n, 2), numels(n, 3);
  const std::clock_t start = std::clock();
  const auto plan = plan_zero3(numels, std::vector<std::string>(n, "p"), groups, 2, "f");
  const auto starts = zero3_group_starts(groups);
  size_t pieces = 0;
  for (size_t i = 0; i < n; ++i) {
    const auto s = zero3_slices(plan[i], starts, 2);
    REQUIRE(s.size() == 2);
    REQUIRE(s[1].group == i);
    pieces += s.size();
  }
  const double cpu = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  CHECK(pieces == 2 * n);
  CHECK(cpu < 1.0);
}
