// libFuzzer target: torch.export programs (formats/export) on arbitrary bytes: the .pt2 archive (zip,
// records' CRC-32, model.json, the weights' configs, views) and, on the same bytes as JSON, the
// model.json parser and the BatchNorm owners. Every tensor view handed out is checked against the
// input and its elements are read.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/export/export_batchnorm.h"
#include "formats/export/export_program.h"
#include "formats/export/pt2_archive.h"
#include "fuzz_common.h"
#include "util/error.h"
#include "util/mapped_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace swavg;
  auto file = mapped_file::from_memory(fuzz::bytes(data, size), "fuzz.pt2");
  try {
    const pt2_archive a = read_pt2_archive(file, "fuzz.pt2");
    volatile uint64_t sum = 0;
    for (const auto& list : {&a.weights, &a.constants})
      for (const auto& t : *list) sum = sum + fuzz::touch_view(t.view, file->data(), file->data() + file->size());
    find_export_batchnorms(a.program, "fuzz.pt2");
  } catch (const error&) {
  }
  try {
    const export_program p = parse_export_program(fuzz::bytes(data, size), "fuzz.json");
    find_export_batchnorms(p, "fuzz.json");
  } catch (const error&) {
  }
  return 0;
}
