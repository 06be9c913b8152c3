#include "formats/io/input_kinds.h"

#include <dirent.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "formats/dcp/dcp_input.h"
#include "formats/deepspeed/deepspeed_checkpoint.h"
#include "formats/deepspeed/megatron_checkpoint.h"
#include "formats/export/pt2_archive.h"
#include "formats/safetensors/safetensors.h"
#include "formats/torch/legacy_torch_file.h"
#include "formats/torch/torch_file.h"
#include "formats/torch/torchscript.h"
#include "formats/zip/zip_reader.h"
#include "util/error.h"
#include "util/mapped_file.h"
#include "util/paths.h"
#include "util/read_file.h"
#include "util/text.h"

namespace swavg {
namespace {

// A folder holding what a Hugging Face library loads: weights (*.safetensors, *.bin, an index) or
// a config.json / model_index.json. One holding none is claimed by no row (its lookup,
// locate_checkpoint, says what it looked for).
bool holds_hf_files(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (!dir) return false;
  bool found = false;
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name == "config.json" || name == "model_index.json" || ends_with(name, ".safetensors") ||
        ends_with(name, ".bin") || is_index_name(name)) {
      found = true;
      break;
    }
  }
  ::closedir(dir);
  return found;
}

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

// A non-empty file: the file kinds are told by their first bytes.
bool has_bytes(const input_probe& p) { return !p.folder && p.file && p.file->size() > 0; }
bool is_zip(const input_probe& p) { return has_bytes(p) && looks_like_zip(p.file->data(), p.file->size()); }
// Which ZIP archive it is, from one read of its directory: torch.save, TorchScript (code/) or a
// torch.export program (archive_format).
input_kind zip_kind(const input_probe& p) {
  const zip_reader zip = read_zip(*p.file);
  if (is_torchscript_archive(zip)) return input_kind::torchscript;
  return is_pt2_archive(zip) ? input_kind::export_program : input_kind::torch;
}

void refuse_key(const std::string& key, const std::string& path, const char* what) {
  if (!key.empty()) throw usage_error(fmt::format("{}: --key applies to torch.save files, this is {}", path, what));
}

std::vector<std::string> the_file(const std::string& path) { return {path}; }

state_dict read_weight_file(const std::string& path, const load_options& options);

// The rows' claims and reads, in the table's order.

bool megatron_claims(const input_probe& p) { return p.folder && megatron_backend(p.path).has_value(); }
state_dict megatron_read(const input_probe& p, const load_options&) {
  refuse_megatron_checkpoint(p.path);
  throw input_error(p.path + ": a Megatron-core distributed checkpoint, which swavg does not read");
}
std::vector<std::string> megatron_files(const std::string& path) {
  refuse_megatron_checkpoint(path);  // a refused input reads nothing: refused before any output check
  return {};
}

// Megatron-core's torch_dist folders hold .metadata too: theirs is the Megatron row.
bool dcp_claims(const input_probe& p) {
  return p.folder && is_dcp_folder(p.path) && !megatron_backend(p.path).has_value();
}
state_dict dcp_read(const input_probe& p, const load_options& o) { return read_dcp_folder(p.path, o.key); }

bool deepspeed_claims(const input_probe& p) { return p.folder && !deepspeed_tag_folder(p.path).empty(); }
state_dict deepspeed_read(const input_probe& p, const load_options& o) {
  return read_deepspeed_checkpoint(p.path, o.key);
}

bool hf_claims(const input_probe& p) { return p.folder ? holds_hf_files(p.path) : is_index_name(p.path); }
state_dict hf_read(const input_probe& p, const load_options& o) {
  const checkpoint_location at = locate_checkpoint(p.path);
  if (at.index.empty()) {
    state_dict sd = read_weight_file(at.file, o);
    sd.path = p.path;
    return sd;
  }
  return load_sharded(p.path, at.index, read_hf_index(at.index),
                      [&o](const std::string& shard) { return read_weight_file(shard, o); });
}
// Trainer's own folders: checkpoint-N/ (PREFIX_CHECKPOINT_DIR), or any holding its training_args.bin.
bool is_trainer_folder(const std::string& path) {
  const std::string name = base_name(without_trailing_slash(path));
  const std::string prefix = "checkpoint-";
  const bool named = name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
                     std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                                 [](char c) { return c >= '0' && c <= '9'; });
  return named || is_regular_file(path_in_folder(path, "training_args.bin"));
}
std::string hf_waits_for(const std::string& path) {
  if (!is_folder(path) || !is_trainer_folder(path)) return "";
  const std::string state = path_in_folder(without_trailing_slash(path), "trainer_state.json");
  if (!is_regular_file(state)) return "trainer_state.json, which the Trainer writes last";
  // Written with one json.dump into an open file: until then it is empty or cut short.
  try {
    if (nlohmann::json::accept(read_text_file(state))) return "";
  } catch (const error& e) {
    return fmt::format("trainer_state.json to be readable ({})", e.what());
  }
  return "trainer_state.json to be whole JSON";
}
std::vector<std::string> hf_files(const std::string& path) {
  const checkpoint_location at = locate_checkpoint(path);
  if (at.index.empty()) return {at.file};
  std::vector<std::string> files{at.index};
  for (const auto& shard : shard_names(read_hf_index(at.index))) files.push_back(path_in_folder(at.folder, shard));
  return files;
}

state_dict took_key(state_dict sd) {
  if (!sd.key.empty()) spdlog::debug("{}: took the state dict at '{}'", sd.path, sd.key);
  return sd;
}

bool torch_claims(const input_probe& p) { return is_zip(p) && zip_kind(p) == input_kind::torch; }
state_dict torch_read(const input_probe& p, const load_options& o) { return took_key(read_torch_file(p.file, o.key)); }

bool torchscript_claims(const input_probe& p) { return is_zip(p) && zip_kind(p) == input_kind::torchscript; }
state_dict torchscript_read(const input_probe& p, const load_options& o) {
  refuse_key(o.key, p.path, "TorchScript");
  return read_torchscript(p.file);
}

bool export_claims(const input_probe& p) { return is_zip(p) && zip_kind(p) == input_kind::export_program; }
state_dict export_read(const input_probe& p, const load_options& o) {
  refuse_key(o.key, p.path, "a torch.export program");
  return read_pt2_state_dict(p.file, p.path);
}

// A .safetensors file that does not look like one is claimed anyway: the parser says what is wrong.
bool safetensors_claims(const input_probe& p) {
  return has_bytes(p) && (looks_like_safetensors(p.file->data(), p.file->size()) || has_safetensors_extension(p.path));
}
state_dict safetensors_read(const input_probe& p, const load_options& o) {
  refuse_key(o.key, p.path, "safetensors");
  auto content = read_safetensors(p.file);
  state_dict sd;
  sd.path = p.path;
  sd.format = file_format::safetensors;
  sd.tensors = std::move(content.tensors);
  sd.metadata = std::move(content.metadata);
  return sd;
}

bool legacy_claims(const input_probe& p) {
  return has_bytes(p) && !looks_like_zip(p.file->data(), p.file->size()) &&
         looks_like_legacy_torch_file(p.file->data(), p.file->size());
}
state_dict legacy_read(const input_probe& p, const load_options& o) {
  return took_key(read_legacy_torch_file(p.file, o.key));
}

const std::vector<input_row> kRows = {
    {input_kind::megatron, "megatron", "a Megatron-core distributed checkpoint",
     "a folder whose metadata.json (beside .metadata or common.pt) is a JSON object with a string "
     "\"sharded_backend\" (refused)",
     megatron_claims, megatron_read, megatron_files, false, false, nullptr},
    {input_kind::dcp, "dcp", "a PyTorch DCP folder", "a folder holding .metadata (and no Megatron-core metadata.json)",
     dcp_claims, dcp_read, dcp_files, false, false, nullptr},
    {input_kind::deepspeed, "deepspeed", "a DeepSpeed checkpoint",
     "a tag folder holding DeepSpeed's model states, or the folder whose `latest` names one", deepspeed_claims,
     deepspeed_read, deepspeed_files, false, false, nullptr},
    {input_kind::hf, "hf", "a Hugging Face checkpoint",
     "a folder holding *.safetensors, *.bin, an index, config.json or model_index.json, or a file named *.index.json",
     hf_claims, hf_read, hf_files, true, false, hf_waits_for},
    {input_kind::torch, "torch", "a torch.save checkpoint", "a ZIP archive without code/", torch_claims, torch_read,
     the_file, true, true, nullptr},
    {input_kind::torchscript, "torchscript", "a TorchScript archive", "a ZIP archive with code/", torchscript_claims,
     torchscript_read, the_file, true, true, nullptr},
    {input_kind::export_program, "export", "a torch.export program",
     "a ZIP archive whose root folder holds archive_format (torch.export.save's .pt2)", export_claims, export_read,
     the_file, true, true, nullptr},
    {input_kind::safetensors, "safetensors", "a safetensors file",
     "an 8-byte header length then '{', or a file named *.safetensors", safetensors_claims, safetensors_read, the_file,
     true, true, nullptr},
    {input_kind::torch_legacy, "torch-legacy", "a legacy torch.save checkpoint",
     "a pickle stream (torch.save before PyTorch 1.6, or _use_new_zipfile_serialization=False)", legacy_claims,
     legacy_read, the_file, true, true, nullptr},
};

[[noreturn]] void unclaimed(const input_probe& p) {
  // A folder: Hugging Face's lookup says what it looked for and what the folder holds.
  if (p.folder) locate_checkpoint(p.path);
  if (p.folder) throw input_error(p.path + ": a folder without a checkpoint");
  if (p.file->size() == 0) throw input_error(p.path + ": empty file, expected a checkpoint");
  throw input_error(
      fmt::format("{}: not a PyTorch checkpoint, TorchScript archive or safetensors file (starts with {})", p.path,
                  leading_bytes(*p.file)));
}

// A Hugging Face checkpoint's weight file (a shard, the one file of a folder): one of the file kinds.
state_dict read_weight_file(const std::string& path, const load_options& options) {
  input_probe p;
  p.path = path;
  p.file = mapped_file::open(path);
  for (const input_row& row : kRows) {
    if (!row.weight_file || !row.claims(p)) continue;
    state_dict sd = row.read(p, options);
    sd.kind = row.kind;
    p.file->release_pages();
    return sd;
  }
  unclaimed(p);
}

}  // namespace

const std::vector<input_row>& input_rows() { return kRows; }

const input_row& input_row_of(input_kind kind) {
  for (const input_row& row : kRows)
    if (row.kind == kind) return row;
  throw std::logic_error("input kind without a row");
}

const char* input_kind_name(input_kind kind) { return input_row_of(kind).name; }
const char* input_kind_description(input_kind kind) { return input_row_of(kind).description; }

input_probe probe_input(const std::string& path) {
  input_probe p;
  p.path = path;
  p.folder = is_folder(path);
  if (!p.folder) p.file = mapped_file::open(path);
  return p;
}

const input_row& claim_input(const input_probe& probe) {
  for (const input_row& row : kRows)
    if (row.claims(probe)) return row;
  unclaimed(probe);
}

input_kind detect_input_kind(const std::string& path) { return claim_input(probe_input(path)).kind; }

std::string waits_for(const input_row& row, const std::string& path) {
  return row.waits_for ? row.waits_for(path) : std::string();
}

const input_row* claim_by_path(const std::string& path) {
  input_probe p;
  p.path = path;
  p.folder = is_folder(path);
  for (const input_row& row : kRows)
    if (!row.weight_file && row.claims(p)) return &row;
  if (p.folder) unclaimed(p);
  return nullptr;
}

}  // namespace swavg
