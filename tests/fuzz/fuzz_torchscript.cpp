// libFuzzer target: the TorchScript reader (zip + unpickler + code records inflated and scanned +
// module tree + storages and views) on arbitrary bytes. Every tensor view handed out is checked
// against the input and its elements are read.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/torch/torchscript.h"
#include "fuzz_common.h"
#include "util/error.h"
#include "util/mapped_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace swavg;
  auto file = mapped_file::from_memory(fuzz::bytes(data, size), "fuzz.ts");
  try {
    state_dict sd = read_torchscript(file);
    volatile uint64_t sum = 0;
    for (const auto& t : sd.tensors) {
      if (t.kind != tensor_kind::parameter && t.kind != tensor_kind::buffer) fuzz::die("tensor without a kind");
      sum = sum + fuzz::touch_view(t.view, file->data(), file->data() + file->size());
    }
  } catch (const error&) {
  }
  // The scanner alone, on the same bytes as code text.
  try {
    scan_torchscript_classes("__torch__", std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.py");
  } catch (const error&) {
  }
  return 0;
}
