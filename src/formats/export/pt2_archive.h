/*
 * torch.export.save's archive (.pt2), read as data: a ZIP of stored records under one root folder
 * (the file's stem), checked by zip_reader, whose records swavg reads are checked against their
 * CRC-32 as well (LibTorch's reader checks none):
 *
 *   <root>/archive_format                          "pt2"
 *   <root>/byteorder                               "little"
 *   <root>/models/model.json                       the program (export_program.h)
 *   <root>/data/weights/model_weights_config.json  {"config": {FQN: {path_name, is_param, use_pickle,
 *                                                   tensor_meta: {dtype, sizes, strides, storage_offset,
 *                                                   layout, device}}}}
 *   <root>/data/weights/<path_name>                a storage's raw bytes (tied tensors share one)
 *   <root>/data/constants/...                      the same for tensor constants and non-persistent buffers
 *   <root>/data/sample_inputs/model.pt             a pickle: never read
 *
 * Parse, validate, then view: the weights are views into the mapped records once every entry agrees
 * with the signature (each parameter and persistent buffer has one, with the dtype and sizes of its
 * graph input, nothing else is there), its storage holds every element its sizes, strides and
 * offset reach, and it is plain data (use_pickle, a tensor subclass, is refused). An AOTInductor
 * package (compiled code under data/aotinductor/) is refused by name: swavg runs no code from a file.
 */
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "formats/export/export_program.h"
#include "tensor/state_dict.h"

namespace swavg {

class mapped_file;
class zip_reader;

struct pt2_archive {
  std::string path;
  export_program program;
  // The parameters and persistent buffers (the program's state_dict), in the signature's order:
  // parameters, then buffers.
  std::vector<named_tensor> weights;
  // Tensor constants and non-persistent buffers, by target.
  std::vector<named_tensor> constants;
  std::shared_ptr<const mapped_file> file;
};

// A ZIP archive whose root folder holds an archive_format record (AOTInductor packages too).
bool is_pt2_archive(const zip_reader& zip);

// Reads and validates the whole archive; throws input_error naming `path` and the record.
pt2_archive read_pt2_archive(std::shared_ptr<const mapped_file> file, const std::string& path);

// The archive's weights as a checkpoint (inspect, convert, average).
state_dict read_pt2_state_dict(std::shared_ptr<const mapped_file> file, const std::string& path);

}  // namespace swavg
