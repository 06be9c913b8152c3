// libFuzzer target: the ZIP reader (torch.save and TorchScript containers) on arbitrary bytes.
// Every record's bytes are read (CRC-32), so a record handed out past the input is caught.
#include <cstddef>
#include <cstdint>
#include <string>

#include "formats/zip/zip_reader.h"
#include "fuzz_common.h"
#include "util/crc32.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace swavg;
  (void)looks_like_zip(data, size);
  try {
    zip_reader zip(data, size, "fuzz.zip");
    volatile uint32_t crc = 0;
    for (const zip_entry& e : zip.entries()) {
      if (e.data_offset > size || e.compressed_size > size - e.data_offset) fuzz::die("record outside the input");
      if (zip.find(e.name) == nullptr) fuzz::die("find() misses a listed record");
      // miniz ignores ASCII case: the name in other case finds this record or is refused, never another.
      std::string other = e.name;
      for (char& c : other) c = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 'a' + 'A') : c;
      try {
        const zip_entry* f = zip.find(other);
        if (f != nullptr && f != &e) fuzz::die("find() takes another record for a name in other case");
      } catch (const error&) {
      }
      try {
        const zip_entry& s = zip.stored(e.name);
        crc = crc32_update(crc, zip.bytes(s), s.size);
      } catch (const error&) {
      }
    }
    try {
      (void)zip.root();
    } catch (const error&) {
    }
  } catch (const error&) {
  }
  return 0;
}
