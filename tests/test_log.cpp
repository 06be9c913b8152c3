// Counts in messages read as English: "1 file", "2 files", "0 files", and irregular plurals.
#include <catch2/catch.hpp>
#include <cstdint>

#include "util/log.h"

using namespace swavg;

TEST_CASE("counted puts the noun in the plural for every count but 1", "[log]") {
  CHECK(counted(0, "file") == "0 files");
  CHECK(counted(1, "file") == "1 file");
  CHECK(counted(2, "file") == "2 files");
  CHECK(counted(1, "entry", "entries") == "1 entry");
  CHECK(counted(3, "entry", "entries") == "3 entries");
  CHECK(counted(UINT64_MAX, "byte") == "18446744073709551615 bytes");
}
