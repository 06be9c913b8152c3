#include "formats/io/folder_writers.h"

#include "formats/dcp/dcp_output.h"
#include "formats/hf/sharded_output.h"

namespace swavg {
std::unique_ptr<folder_writer> make_folder_writer(const folder_writer_options& options) {
  switch (options.format) {
    case output_format::dcp: return std::make_unique<dcp_folder_writer>(options.out, options.first_input, options.key);
    case output_format::torch:
    case output_format::safetensors: break;
  }
  return std::make_unique<hf_folder_writer>(
      hf_writer_options{options.out, options.format, options.max_shard_size, options.names, options.source_index});
}

}  // namespace swavg
