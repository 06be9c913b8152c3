// libFuzzer target: the safetensors reader on arbitrary bytes. Every tensor handed out is checked
// against the input and read in full.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/safetensors/safetensors.h"
#include "fuzz_common.h"
#include "util/error.h"
#include "util/mapped_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace swavg;
  (void)looks_like_safetensors(data, size);
  auto file = mapped_file::from_memory(fuzz::bytes(data, size), "fuzz.safetensors");
  try {
    safetensors_content c = read_safetensors(file);
    volatile uint64_t sum = 0;
    for (const auto& t : c.tensors) {
      if (!t.view.is_contiguous()) fuzz::die("safetensors tensor is not contiguous");
      sum = sum + fuzz::touch_view(t.view, file->data(), file->data() + file->size());
    }
  } catch (const error&) {
  }
  return 0;
}
