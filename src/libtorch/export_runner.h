/*
 * Runs a torch.export program's graph (formats/export/export_program.h) node by node through
 * LibTorch's dispatcher: nothing from the file runs but the ATen operators on one allow list
 * (kExportOperators in export_runner.cpp: the core ATen operators of convolutional and linear
 * models, all of them functional) and integer arithmetic on shapes. Before anything runs, every
 * node's operator is looked up on the list and in this LibTorch, and its arguments are bound to the
 * operator's schema by name: omitted ones take the schema's defaults, a number passed for a Tensor
 * becomes a wrapped number (as Python's argument parser makes it), device arguments become the
 * run's device; an argument of another type than the schema's, a missing or unknown one, or
 * outputs that do not match the schema's returns are input_error naming the node.
 *
 * Each value is dropped after its last reader, so a forward holds what the graph's live values
 * need, not every activation.
 */
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "formats/export/export_program.h"

namespace swavg {

class export_runner {
 public:
  // Binds `program` (which must outlive the runner); `path` names the file in messages.
  export_runner(const export_program& program, std::string path, c10::Device device);
  ~export_runner();
  export_runner(const export_runner&) = delete;
  export_runner& operator=(const export_runner&) = delete;

  // Replaces a float argument of node `node` (BatchNorm's momentum) for the next runs.
  void set_real(size_t node, const std::string& argument, double value);

  // Runs the graph on one tensor per program input, in order; returns one value per program output
  // (None for a user output that is None). Errors from an operator propagate as LibTorch throws them.
  std::vector<c10::IValue> run(const std::vector<at::Tensor>& inputs);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Whether the target "torch.ops.aten.convolution.default" is on the allow list.
bool is_allowed_export_target(const std::string& target);

}  // namespace swavg
