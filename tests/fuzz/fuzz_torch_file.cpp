// libFuzzer target: the torch.save reader (zip + unpickler + storages and views) on arbitrary bytes.
// Every tensor view handed out is checked against the input and its elements are read.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/torch/torch_file.h"
#include "fuzz_common.h"
#include "util/error.h"
#include "util/mapped_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace swavg;
  auto file = mapped_file::from_memory(fuzz::bytes(data, size), "fuzz.pt");
  // The automatic choice of state dict, and an explicit dotted key.
  for (const char* key : {"", "model.module"}) {
    try {
      state_dict sd = read_torch_file(file, key);
      volatile uint64_t sum = 0;
      for (const auto& t : sd.tensors) sum = sum + fuzz::touch_view(t.view, file->data(), file->data() + file->size());
    } catch (const error&) {
    }
  }
  return 0;
}
