/*
 * Every entry of the state dicts a fold reads ends in exactly one place: a tensor is folded
 * (plan.h), a non-tensor entry ("_extra_state", "epoch", an opaque object) is carried over from the
 * latest input holding it, and a tensor tied to an earlier one in every input (same storage, same
 * view: an output embedding tied to the input one) is written as a second view of that tensor's
 * output storage instead of a copy. Entries no output can hold are refused by the readers (sparse
 * tensors, tensors under non-string keys) or by the writers (objects in safetensors).
 */
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "fold/plan.h"
#include "tensor/state_dict.h"

namespace swavg {

struct carried_entry {
  object_entry entry;  // points into the state dict it came from
  std::string from;    // that state dict's file
};

// The non-tensor entries of `resume` (may be null) and `inputs`, by name in first-seen order, each
// taken from the last of them that holds it.
std::vector<carried_entry> plan_carried(const std::vector<state_dict>& inputs, const state_dict* resume);

// For each tensor of `plan`, the index of an earlier one it is tied to: in every input (and the
// resumed average) both are the same view of the same storage, and both are folded the same way, so
// their outputs are equal. nullopt for the rest and for dropped tensors. One pass: hashed by the
// views' storages and geometry.
std::vector<std::optional<size_t>> find_ties(const fold_plan& plan);

}  // namespace swavg
