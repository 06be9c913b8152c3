// util/text.h: prefix and suffix tests, at their edges (empty, equal, one longer).
#include <catch2/catch.hpp>

#include <string>

#include "util/text.h"

using namespace swavg;

TEST_CASE("starts_with and ends_with, at their edges", "[text][unit]") {
  CHECK(starts_with("torch.float32", "torch."));
  CHECK(starts_with("torch.", "torch."));  // equal: the last valid length
  CHECK(!starts_with("torch", "torch."));  // one shorter than the prefix
  CHECK(starts_with("x", ""));
  CHECK(!starts_with("Torch.x", "torch."));
  CHECK(ends_with("model.safetensors", ".safetensors"));
  CHECK(ends_with(".safetensors", ".safetensors"));
  CHECK(!ends_with("safetensors", ".safetensors"));
  CHECK(ends_with("", ""));
  CHECK(!ends_with("a.bin.json", ".bin"));
  const std::string with_nul("a\0.pt", 5);  // views, not C strings: a NUL byte is a byte
  CHECK(ends_with(with_nul, std::string_view(".pt")));
  CHECK(starts_with(with_nul, std::string_view("a\0", 2)));
}
