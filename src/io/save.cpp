#include "io/save.h"

#include <nlohmann/json.hpp>

#include "core/tensor_bridge.h"
#include "io/safetensors.h"
#include "io/torch_writer.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace swavg {

output_format choose_output_format(const std::string& path, const std::string& requested) {
  if (requested == "torch") return output_format::torch;
  if (requested == "safetensors") return output_format::safetensors;
  if (!requested.empty()) throw usage_error("--format: expected torch or safetensors, got '" + requested + "'");
  const std::string ext = ".safetensors";
  if (path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0)
    return output_format::safetensors;
  return output_format::torch;
}

uint64_t save_state_dict(const std::string& path, const std::vector<named_tensor>& tensors, output_format format,
                         const std::map<std::string, std::string>& metadata) {
  atomic_file out(path);
  if (format == output_format::torch) {
    std::map<std::string, std::string> records;
    if (!metadata.empty()) records["swavg.json"] = nlohmann::json(metadata).dump(1);
    write_torch_state_dict(out, tensors, records);
  } else {
    std::vector<safetensors_writer::spec> specs;
    for (const auto& t : tensors) specs.push_back({t.name, t.view.type, t.view.shape});
    safetensors_writer writer(out, specs, metadata);
    for (const auto& t : tensors) {
      if (t.view.is_contiguous()) {
        writer.write(t.view.data(), t.view.nbytes());
      } else {
        at::Tensor c = to_tensor(t.view).contiguous();
        writer.write(c.data_ptr(), c.nbytes());
      }
    }
    writer.finish();
  }
  out.commit();
  return out.tell();
}

}  // namespace swavg
