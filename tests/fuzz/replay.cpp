/*
 * swavg-replay: `swavg inspect` without LibTorch, for sanitizer builds. It opens a file through the
 * same code as swavg (formats/io/load.cpp: format detection, the torch.save and safetensors readers), reads
 * every byte of every tensor it hands out, and prints what `swavg inspect --json` prints about
 * tensors and opaque objects. It links the seams' stand-ins (src/libtorch/without_libtorch.cpp), so
 * TorchScript archives are refused (they need LibTorch's loader: exit 1, needs LibTorch).
 * Errors are reported and exit as in swavg (exit codes 1-5), so the malformed-input suite
 * (tests/cli/test_hostile.py) runs through it under AddressSanitizer and UBSan in minutes instead
 * of a sanitized LibTorch build.
 *
 *   swavg-replay inspect [--json] [--key K] FILE
 */
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>

#include "formats/io/load.h"
#include "fuzz_common.h"
#include "util/error.h"
#include "util/mapped_file.h"

int main(int argc, char** argv) {
  using namespace swavg;
  std::string path;
  load_options options;
  bool json = false;
  int i = 1;
  if (i < argc && std::strcmp(argv[i], "inspect") == 0) ++i;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json") {
      json = true;
    } else if (a == "--key" && i + 1 < argc) {
      options.key = argv[++i];
    } else if (path.empty() && (a.empty() || a[0] != '-')) {
      path = a;
    } else {
      std::fprintf(stderr, "usage: swavg-replay inspect [--json] [--key K] FILE\n");
      return static_cast<int>(exit_code::usage);
    }
  }
  if (path.empty()) {
    std::fprintf(stderr, "usage: swavg-replay inspect [--json] [--key K] FILE\n");
    return static_cast<int>(exit_code::usage);
  }
  try {
    state_dict sd = load_state_dict(path, options);
    nlohmann::ordered_json doc;
    doc["file"] = sd.path;
    doc["format"] = format_name(sd.format);
    doc["key"] = sd.key;
    auto tensors = nlohmann::ordered_json::array();
    uint64_t checksum = 0;
    for (const auto& t : sd.tensors) {
      // Every element, through the view's strides, as averaging reads them, after checking that the
      // storage lies inside the mapped file (AddressSanitizer does not watch mappings).
      const auto file = std::static_pointer_cast<const mapped_file>(t.view.owner);
      checksum += fuzz::touch_view(t.view, file->data(), file->data() + file->size(), INT64_MAX);
      tensors.push_back({{"name", t.name}, {"dtype", dtype_name(t.view.type)}, {"shape", t.view.shape}});
    }
    doc["tensors"] = std::move(tensors);
    auto list = [](const std::vector<other_entry>& entries) {
      auto a = nlohmann::ordered_json::array();
      for (const auto& e : entries) a.push_back({{"path", e.path}, {"type", e.type}, {"value", e.value}});
      return a;
    };
    doc["others"] = list(sd.others);
    doc["opaque"] = list(sd.opaque);
    doc["checksum"] = checksum;
    if (json)
      std::cout << doc.dump(1) << "\n";
    else
      std::cout << sd.path << ": " << format_name(sd.format) << ", " << sd.tensors.size() << " tensors\n";
  } catch (const error& e) {
    std::fprintf(stderr, "swavg-replay: error: %s\n", e.what());
    return static_cast<int>(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "swavg-replay: internal error: %s\n", e.what());
    return static_cast<int>(exit_code::internal);
  }
  return 0;
}
