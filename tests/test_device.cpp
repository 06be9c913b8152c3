// Device names as the command line gives them: cpu, cuda, cuda:N, and nothing else.
#include <catch2/catch.hpp>

#include "tensor/device.h"

using namespace swavg;

TEST_CASE("devices parse and print back", "[device]") {
  for (const char* text : {"cpu", "cuda", "cuda:0", "cuda:7", "cuda:2147483647"}) {
    INFO(text);
    const auto d = parse_device(text);
    REQUIRE(d);
    CHECK(device_name(*d) == text);
  }
  CHECK(parse_device("cpu")->is_cpu());
  CHECK(parse_device("cuda")->index == -1);
  CHECK(parse_device("cuda:0")->index == 0);
}

TEST_CASE("anything else is refused", "[device]") {
  for (const char* text : {"", "CPU", "gpu", "tpu", "cuda:", "cuda:-1", "cuda:+1", "cuda:1x", "cuda: 1", "cuda:0:1",
                           "cuda:2147483648", "cpu:0", "cudax"}) {
    INFO("'" << text << "'");
    CHECK_FALSE(parse_device(text));
  }
}
