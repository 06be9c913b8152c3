/*
 * The formats swavg writes: one file (torch.save, safetensors) or a folder of them (a Hugging Face
 * folder of either, or a PyTorch Distributed Checkpoint). save.h writes one file; folder_writers.h
 * chooses a folder's writer.
 */
#pragma once

#include <optional>
#include <string>

namespace swavg {

// dcp: a PyTorch Distributed Checkpoint folder (formats/dcp/dcp_output.h), folder outputs only.
enum class output_format { torch, safetensors, dcp };

const char* output_format_name(output_format f);  // "torch", "safetensors", "dcp"
std::optional<output_format> output_format_from_name(const std::string& name);

}  // namespace swavg
