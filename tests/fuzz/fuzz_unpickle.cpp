// libFuzzer target: the allow-list unpickler on arbitrary bytes (torch.save's data.pkl).
#include <cstddef>
#include <cstdint>

#include "formats/pickle/pickle.h"
#include "formats/pickle/unpickler.h"
#include "fuzz_common.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace swavg;
  // Small limits: the defaults allow checkpoints with millions of objects, which only slows
  // fuzzing down without reaching new code.
  unpickle_limits limits;
  limits.max_nodes = 200'000;
  limits.max_memo = 200'000;
  limits.max_stack = 200'000;
  // The proportional memory budget with a small base: an input must amplify 64-fold to pass it,
  // which the fuzzer finds (list(x), bytes(x) on memoised objects) and which must stay an input_error.
  limits.base_bytes = 1 << 20;
  try {
    auto doc = unpickle(data, size, "fuzz.pkl", limits);
    if (!doc->root()) fuzz::die("unpickle returned no root");
    // The type names of the root and its children (what inspect prints).
    volatile size_t n = pickle_type_name(*doc->root()).size();
    for (const auto* item : doc->root()->items)
      if (item) n = n + pickle_type_name(*item).size();
    for (const auto& [k, v] : doc->root()->entries)
      if (k && v) n = n + pickle_type_name(*k).size() + pickle_type_name(*v).size();
    (void)n;
  } catch (const error&) {
  }
  return 0;
}
