#include "formats/core/output_format.h"

namespace swavg {

const char* output_format_name(output_format f) {
  switch (f) {
    case output_format::torch: return "torch";
    case output_format::safetensors: return "safetensors";
    case output_format::dcp: break;
  }
  return "dcp";
}

std::optional<output_format> output_format_from_name(const std::string& name) {
  for (output_format f : {output_format::torch, output_format::safetensors, output_format::dcp})
    if (name == output_format_name(f)) return f;
  return std::nullopt;
}

}  // namespace swavg
