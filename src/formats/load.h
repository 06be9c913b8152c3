/*
 * Opens any checkpoint swavg reads, telling the format by content (never by extension):
 * a ZIP archive is torch.save or, with code/ inside, TorchScript; an 8-byte length followed by a
 * JSON object is safetensors; a pickle stream is the legacy torch.save format (PyTorch < 1.6 or
 * _use_new_zipfile_serialization=False, formats/legacy_torch_file.h), read as torch.load reads it.
 * The extension only decides which error a broken file gets: one named .safetensors is reported by
 * the safetensors parser.
 *
 * A checkpoint argument may also be a sharded checkpoint (formats/sharded_input.h): a Hugging Face
 * index file, or a folder holding an index or one model.safetensors / pytorch_model.bin.
 */
#pragma once

#include <string>
#include <vector>

#include "formats/sharded_input.h"
#include "tensor/state_dict.h"

namespace swavg {

struct load_options {
  std::string key;                          // dotted path to the state dict in a torch.save object
  std::vector<std::string> exclude;         // entries left out (and all under ENTRY.), before stripping
  std::vector<std::string> strip_prefixes;  // removed once each from the start of every name
};

// Throws io_error (missing, unreadable) or input_error (malformed, unsupported).
file_format detect_format(const std::string& path);
// `path`: a file, an index file or a folder; a sharded checkpoint comes back as one state dict.
state_dict load_state_dict(const std::string& path, const load_options& options = {});

// Every file a checkpoint argument reads: the one file, or the index and its shards (reading the
// index only), for the output-path checks.
std::vector<std::string> checkpoint_files(const std::string& path);
// Where a folder output finds the checkpoint's other files (config.json, ...) to copy and the
// weights' names to keep: the folder of a Hugging Face folder or index argument; none ("" folder)
// for a plain file, a DCP folder or a DeepSpeed checkpoint, whose other files are the training
// run's.
checkpoint_location output_source_of(const std::string& path);

}  // namespace swavg
