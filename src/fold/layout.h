/*
 * AveragedModel's state dict layout: every tensor of the model under "module." + its name, plus an
 * int64 0-dim "n_averaged" holding the number of checkpoints averaged. `--layout averaged-model`
 * writes it, `--resume` and update-bn read it back.
 */
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tensor/state_dict.h"

namespace swavg {

constexpr const char* kModulePrefix = "module.";
constexpr const char* kNAveraged = "n_averaged";

// The model's name of a tensor stored in averaged-model layout ("module.fc.weight" -> "fc.weight"),
// or nullopt for n_averaged, which is no tensor of the model.
std::optional<std::string> model_name_in_averaged_layout(const std::string& stored);

// When `tensors` are in averaged-model layout (n_averaged and at least one other tensor, every one
// of which starts with "module."), renames them to the model's names, moves n_averaged out into
// `n_averaged` and returns true; else leaves them as they are.
bool from_averaged_layout(std::vector<named_tensor>& tensors, std::optional<named_tensor>& n_averaged);

// The reverse: prefixes every name with "module." and appends n_averaged.
void to_averaged_layout(std::vector<named_tensor>& tensors, named_tensor n_averaged);

}  // namespace swavg
