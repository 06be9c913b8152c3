// libFuzzer target: a DCP folder's .metadata parser (formats/dcp/dcp_metadata.h) on arbitrary bytes.
// Whatever it accepts must be self-consistent: every tensor's chunks tile it (checked again here)
// and every storage names a plain file of the folder.
#include <cstddef>
#include <cstdint>

#include "formats/dcp/dcp_metadata.h"
#include "fuzz_common.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace swavg;
  try {
    const dcp_metadata m = parse_dcp_metadata(data, size, "fuzz/.metadata");
    for (const auto& e : m.entries) {
      if (e.is_tensor && !check_chunk_tiling(e.size, e.chunks).empty()) fuzz::die("accepted chunks that do not tile");
      for (const auto& c : e.chunks)
        if (c.storage.relative_path.find('/') != std::string::npos) fuzz::die("accepted a storage path with '/'");
    }
  } catch (const error&) {
  }
  return 0;
}
