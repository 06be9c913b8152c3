#include "formats/torch/torch_file.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>

#include "formats/pickle/pickle.h"
#include "formats/pickle/unpickler.h"
#include "formats/torch/legacy_torch_file.h"
#include "formats/zip/zip_reader.h"
#include "util/error.h"
#include "util/mapped_file.h"

namespace swavg {

const char* const kSwavgRecord = "swavg.json";

namespace {

// swavg's own metadata, a JSON object of strings in a record loaders ignore.
std::map<std::string, std::string> read_swavg_record(const zip_reader& zip, const std::string& name,
                                                     const std::string& path) {
  std::map<std::string, std::string> out;
  if (!zip.find(name)) return out;
  const zip_entry& e = zip.stored(name);
  try {
    auto j = nlohmann::json::parse(zip.bytes(e), zip.bytes(e) + e.size);
    for (const auto& [k, v] : j.items())
      if (v.is_string()) out[k] = v.get<std::string>();
  } catch (const nlohmann::json::exception& ex) {
    throw input_error(fmt::format("{}: record '{}' is not valid JSON: {}", path, name, ex.what()));
  }
  return out;
}

}  // namespace

torch_archive::torch_archive() = default;
torch_archive::torch_archive(torch_archive&&) noexcept = default;
torch_archive::~torch_archive() = default;

bool is_torchscript_archive(const zip_reader& zip) {
  const std::string prefix = zip.root() + "/";
  if (zip.find(prefix + "constants.pkl")) return true;
  for (const auto& e : zip.entries())
    if (e.name.compare(0, prefix.size() + 5, prefix + "code/") == 0) return true;
  return false;
}

torch_archive open_torch_archive(const std::shared_ptr<const mapped_file>& file, const std::string& expected) {
  return open_torch_archive(file, std::make_unique<zip_reader>(read_zip(*file)), file->path(), expected);
}

torch_archive open_torch_archive(const std::shared_ptr<const mapped_file>& file, std::unique_ptr<zip_reader> zip,
                                 const std::string& path, const std::string& expected) {
  torch_archive a;
  a.file = file;
  a.zip = std::move(zip);
  if (is_torchscript_archive(*a.zip))
    throw input_error(fmt::format("{}: is a TorchScript archive (torch.jit.save), expected {}", path, expected));
  a.prefix = a.zip->root() + "/";
  if (const zip_entry* order = a.zip->find(a.prefix + "byteorder")) {
    const zip_entry& e = a.zip->stored(order->name);
    std::string value(reinterpret_cast<const char*>(a.zip->bytes(e)), e.size);
    if (value != "little")
      throw input_error(
          fmt::format("{}: byteorder record says '{}'; swavg reads little-endian archives only", path, value));
  }
  const zip_entry& pkl = a.zip->stored(a.prefix + "data.pkl");
  a.doc = unpickle(a.zip->bytes(pkl), pkl.size, fmt::format("{}: {}", path, pkl.name));
  return a;
}

torch_storage_reader archive_storages(const torch_archive& archive) {
  return torch_storage_reader(archive.file, [&archive](const std::string& key) {
    const std::string name = archive.prefix + "data/" + key;
    const zip_entry& e = archive.zip->stored(name);
    return storage_record{fmt::format("storage record '{}'", name), archive.zip->bytes(e), e.size};
  });
}

state_dict read_torch_file(const std::shared_ptr<const mapped_file>& file, const std::string& key) {
  if (!looks_like_zip(file->data(), file->size()) && looks_like_legacy_torch_file(file->data(), file->size()))
    return read_legacy_torch_file(file, key);
  torch_archive archive = open_torch_archive(file, "a torch.save checkpoint here");
  torch_storage_reader reader = archive_storages(archive);
  auto metadata = read_swavg_record(*archive.zip, archive.prefix + kSwavgRecord, file->path());
  state_dict sd = take_state_dict(file->path(), std::move(archive.doc), reader, key);
  sd.metadata = std::move(metadata);
  return sd;
}

}  // namespace swavg
