// libFuzzer target: the step -> value tables of --metric-file (CSV or JSON) on arbitrary bytes.
// A table read is checked: every value finite, as the reader promises.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/io/checkpoint_facts.h"
#include "fuzz_common.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace swavg;
  try {
    const metric_table t = parse_metric_table(fuzz::bytes(data, size), "fuzz.table", "m");
    for (const auto& [step, value] : t.values) {
      if (step < 0) fuzz::die("negative step handed out");
      if (!std::isfinite(value)) fuzz::die("non-finite metric handed out");
    }
  } catch (const error&) {
  }
  return 0;
}
