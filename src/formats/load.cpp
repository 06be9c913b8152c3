#include "formats/load.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "formats/dcp_input.h"
#include "formats/deepspeed_checkpoint.h"
#include "formats/legacy_torch_file.h"
#include "formats/megatron_checkpoint.h"
#include "formats/safetensors.h"
#include "formats/sharded_input.h"
#include "formats/torch_file.h"
#include "formats/torchscript.h"
#include "formats/zip_reader.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace swavg {
namespace {

std::string leading_bytes(const mapped_file& f) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < std::min<size_t>(8, f.size()); ++i) {
    s += kHex[f.data()[i] >> 4];
    s += kHex[f.data()[i] & 15];
    s += ' ';
  }
  return s.empty() ? s : s.substr(0, s.size() - 1);
}

file_format detect(const std::shared_ptr<const mapped_file>& f) {
  const std::string& path = f->path();
  if (f->size() == 0) throw input_error(path + ": empty file, expected a checkpoint");
  if (looks_like_zip(f->data(), f->size())) {
    zip_reader zip = read_zip(*f);
    return is_torchscript_archive(zip) ? file_format::torchscript : file_format::torch;
  }
  // A .safetensors file that does not look like one goes to the parser anyway, which says what is wrong.
  if (looks_like_safetensors(f->data(), f->size()) || has_safetensors_extension(path)) return file_format::safetensors;
  // The legacy torch.save format; read_torch_file tells it from the ZIP one.
  if (looks_like_legacy_torch_file(f->data(), f->size())) return file_format::torch;
  throw input_error(
      fmt::format("{}: not a PyTorch checkpoint, TorchScript archive or safetensors file (starts "
                  "with {})",
                  path, leading_bytes(*f)));
}

state_dict load_single_file(const std::string& path, const load_options& options) {
  auto file = mapped_file::open(path);
  state_dict sd;
  switch (detect(file)) {
    case file_format::torch:
      sd = read_torch_file(file, options.key);
      if (!sd.key.empty()) spdlog::debug("{}: took the state dict at '{}'", path, sd.key);
      break;
    case file_format::torchscript:
      if (!options.key.empty()) throw usage_error(path + ": --key applies to torch.save files, this is TorchScript");
      sd = read_torchscript(file);
      break;
    case file_format::safetensors: {
      if (!options.key.empty()) throw usage_error(path + ": --key applies to torch.save files, this is safetensors");
      auto content = read_safetensors(file);
      sd.path = path;
      sd.format = file_format::safetensors;
      sd.tensors = std::move(content.tensors);
      sd.metadata = std::move(content.metadata);
      break;
    }
  }
  if (file) file->release_pages();
  return sd;
}

}  // namespace

file_format detect_format(const std::string& path) { return detect(mapped_file::open(path)); }

state_dict load_state_dict(const std::string& path, const load_options& options) {
  state_dict sd;
  refuse_megatron_checkpoint(path);  // before DCP's check: its torch_dist folders are DCP folders too
  if (is_dcp_folder(path)) {
    sd = read_dcp_folder(path, options.key);
  } else if (!deepspeed_tag_folder(path).empty()) {
    sd = read_deepspeed_checkpoint(path, options.key);
  } else {
    const checkpoint_location at = locate_checkpoint(path);
    if (at.index.empty()) {
      sd = load_single_file(at.file, options);
      sd.path = path;
    } else {
      sd = load_sharded(path, at.index, read_hf_index(at.index),
                        [&options](const std::string& shard) { return load_single_file(shard, options); });
    }
  }
  exclude_entries(sd, options.exclude);
  strip_prefixes(sd, options.strip_prefixes);
  for (const auto& o : sd.opaque)
    spdlog::debug(
        "{}: '{}' is a {} object, kept opaque (never called; an entry of the state dict is carried as pickle data)",
        path, o.path, o.type);
  return sd;
}

std::vector<std::string> checkpoint_files(const std::string& path) {
  refuse_megatron_checkpoint(path);
  if (is_dcp_folder(path)) return dcp_files(path);
  if (!deepspeed_tag_folder(path).empty()) return deepspeed_files(path);
  const checkpoint_location at = locate_checkpoint(path);
  if (at.index.empty()) return {at.file};
  std::vector<std::string> files{at.index};
  for (const auto& shard : shard_names(read_hf_index(at.index))) files.push_back(path_in_folder(at.folder, shard));
  return files;
}

checkpoint_location output_source_of(const std::string& path) {
  if (is_dcp_folder(path) || !deepspeed_tag_folder(path).empty()) return {};
  return locate_checkpoint(path);
}

}  // namespace swavg
