/*
 * Opens any checkpoint swavg reads, telling its kind by content (never by extension) through the
 * input table (formats/io/input_kinds.h, which lists the kinds, their probe order and their readers):
 * a file, a Hugging Face index file or a folder (Hugging Face, DCP, DeepSpeed; a Megatron-core
 * folder is refused, named). The extension only decides which error a broken file gets: one named
 * .safetensors is reported by the safetensors parser.
 */
#pragma once

#include <string>
#include <vector>

#include "formats/hf/sharded_input.h"
#include "formats/io/input_kinds.h"
#include "tensor/state_dict.h"

namespace swavg {

// The encoding of a single weight file. Throws io_error (missing, unreadable) or input_error
// (malformed, unsupported, not a single file).
file_format detect_format(const std::string& path);
// `path`: a file, an index file or a folder; a sharded checkpoint comes back as one state dict,
// whose `kind` is the input table's row that read it.
state_dict load_state_dict(const std::string& path, const load_options& options = {});

// What a --model file is: a TorchScript module or a torch.export program (the two kinds update-bn
// runs). Throws input_error saying what else it is, io_error for a missing one.
input_kind model_kind(const std::string& path);

// Every file a checkpoint argument reads: the one file, or the index and its shards (reading the
// index only), for the output-path checks.
std::vector<std::string> checkpoint_files(const std::string& path);
// Where a folder output finds the checkpoint's other files (config.json, ...) to copy and the
// weights' names to keep: the folder of a Hugging Face folder or index argument; none ("" folder)
// for a plain file, a DCP folder or a DeepSpeed checkpoint, whose other files are the training
// run's.
checkpoint_location output_source_of(const std::string& path);

}  // namespace swavg
