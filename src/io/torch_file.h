/*
 * Reader for torch.save archives (PyTorch 1.6 through 2.x): a ZIP whose records live under one top
 * folder of any name: data.pkl (the pickled object), data/<key> (one record per storage, raw
 * little-endian bytes), version, and in newer versions byteorder, .format_version,
 * .storage_alignment and .data/serialization_id.
 *
 * data.pkl goes through our allow-list unpickler; tensors become zero-copy views into the mapped
 * file. Before any view is handed out, each storage record must exist, be stored uncompressed and
 * hold exactly numel x itemsize bytes, and every tensor's offset, sizes and strides must stay inside
 * its storage. Tensors that share a storage (tied weights, views) share the mapped bytes.
 *
 * The state dict is found in the unpickled object: the dict at --key, else the top level when it
 * maps names to tensors, else the first of kStateDictKeys present.
 */
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/state_dict.h"

namespace swavg {

class mapped_file;
class zip_reader;

// Keys tried in order when the top level is not itself a state dict.
extern const std::vector<std::string> kStateDictKeys;

// The record under the archive folder that holds swavg's metadata (ignored by torch.load).
extern const char* const kSwavgRecord;

// True for torch.jit.save archives (they carry code/ and constants.pkl).
bool is_torchscript_archive(const zip_reader& zip);

// Reads a torch.save archive. `key` is a dotted path ("model", "ema.module"), empty for automatic.
// Throws input_error naming the file, the tensor and expected vs found.
state_dict read_torch_file(const std::shared_ptr<const mapped_file>& file, const std::string& key);

}  // namespace swavg
