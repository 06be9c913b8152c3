#include "formats/io/load.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "formats/io/input_kinds.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace swavg {

file_format detect_format(const std::string& path) {
  const input_probe probe = probe_input(path);
  const input_row& row = claim_input(probe);
  switch (row.kind) {
    case input_kind::torch:
    case input_kind::torch_legacy:
    case input_kind::export_program: return file_format::torch;
    case input_kind::torchscript: return file_format::torchscript;
    case input_kind::safetensors: return file_format::safetensors;
    case input_kind::hf:
    case input_kind::dcp:
    case input_kind::deepspeed:
    case input_kind::megatron: break;
  }
  throw input_error(fmt::format("{}: {}, not a single weight file", path, row.description));
}

input_kind model_kind(const std::string& path) {
  const input_kind kind = detect_input_kind(path);
  if (kind != input_kind::torchscript && kind != input_kind::export_program)
    throw input_error(
        fmt::format("{}: is {}, not a TorchScript module or a torch.export program: --model needs a file written "
                    "by torch.jit.save (of torch.jit.script or torch.jit.trace) or by "
                    "torch.export.save(ep.run_decompositions(), PATH)",
                    path, input_kind_description(kind)));
  return kind;
}

state_dict load_state_dict(const std::string& path, const load_options& options) {
  const input_probe probe = probe_input(path);
  const input_row& row = claim_input(probe);
  state_dict sd = row.read(probe, options);
  sd.kind = row.kind;
  if (probe.file) probe.file->release_pages();
  exclude_entries(sd, options.exclude);
  strip_prefixes(sd, options.strip_prefixes);
  for (const auto& o : sd.opaque)
    spdlog::debug(
        "{}: '{}' is a {} object, kept opaque (never called; an entry of the state dict is carried as pickle data)",
        path, o.path, o.type);
  return sd;
}

std::vector<std::string> checkpoint_files(const std::string& path) {
  const input_row* row = claim_by_path(path);
  return row ? row->files(path) : std::vector<std::string>{path};
}

checkpoint_location output_source_of(const std::string& path) {
  const input_row* row = claim_by_path(path);
  if (row && !row->has_source_folder) return {};
  return locate_checkpoint(path);
}

}  // namespace swavg
