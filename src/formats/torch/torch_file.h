/*
 * Reader for torch.save archives (PyTorch 1.6 through 2.x): a ZIP whose records live under one top
 * folder of any name: data.pkl (the pickled object), data/<key> (one record per storage, raw
 * little-endian bytes), version, and in newer versions byteorder, .format_version,
 * .storage_alignment and .data/serialization_id. The older format (formats/torch/legacy_torch_file.h)
 * goes through the same state-dict selection and storage checks (formats/torch/torch_state_dict.h).
 *
 * data.pkl goes through our allow-list unpickler; tensors become zero-copy views into the mapped
 * file. Each storage record must exist and be stored uncompressed.
 */
#pragma once

#include <memory>
#include <string>

#include "formats/torch/torch_state_dict.h"
#include "tensor/state_dict.h"
#include "util/listing.h"  // quoted_list, for the messages of the readers that include this

namespace swavg {

class mapped_file;
class zip_reader;
class pickle_document;

// The record under the archive folder that holds swavg's metadata (ignored by torch.load).
extern const char* const kSwavgRecord;

// True for torch.jit.save archives (they carry code/ and constants.pkl).
bool is_torchscript_archive(const zip_reader& zip);

// A torch.save archive opened and checked: its ZIP directory and its unpickled data.pkl.
struct torch_archive {
  std::shared_ptr<const mapped_file> file;
  std::unique_ptr<zip_reader> zip;
  std::string prefix;  // "<root>/"
  std::unique_ptr<pickle_document> doc;
  torch_archive();
  torch_archive(torch_archive&&) noexcept;
  ~torch_archive();
};

// Opens a torch.save archive; a TorchScript archive or a big-endian one is an input_error that says
// `expected` ("a torch.save checkpoint").
torch_archive open_torch_archive(const std::shared_ptr<const mapped_file>& file, const std::string& expected);
// The same for an archive `zip` already read over bytes of `file` (a chunk inside a DCP .distcp
// file); `path` names it in messages.
torch_archive open_torch_archive(const std::shared_ptr<const mapped_file>& file, std::unique_ptr<zip_reader> zip,
                                 const std::string& path, const std::string& expected);

// The storages of an archive's data/ records (`archive` must outlive the reader).
torch_storage_reader archive_storages(const torch_archive& archive);

// Reads a torch.save file: the ZIP archive or, for a file that is not a ZIP, the legacy format
// (formats/torch/legacy_torch_file.h). `key` is a dotted path ("model", "ema.module"), empty for automatic.
// Throws input_error naming the file, the tensor and expected vs found.
state_dict read_torch_file(const std::shared_ptr<const mapped_file>& file, const std::string& key);

}  // namespace swavg
