/*
 * The folder formats swavg writes, one place: an output_format and the job's settings make the
 * folder_writer (folder_writer.h) of a Hugging Face folder (torch or safetensors shards) or of a
 * DCP folder. The folder protocol (output_folder.h) takes the writer and knows no format.
 */
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "formats/core/folder_writer.h"
#include "formats/core/output_format.h"
#include "formats/hf/hf_index.h"

namespace swavg {

struct folder_writer_options {
  std::string out;  // the output folder, without its trailing slash
  output_format format = output_format::safetensors;
  uint64_t max_shard_size = 0;  // Hugging Face shards
  weights_naming names;         // Hugging Face: the input folder's library and variant
  std::string source_index;     // Hugging Face: the input's index ("" none), for its total_parameters
  std::string first_input;      // dcp: chunked like it when it is a DCP folder,
  std::string key;              // its state dict taken at this --key
};

std::unique_ptr<folder_writer> make_folder_writer(const folder_writer_options& options);

}  // namespace swavg
