/*
 * The model swavg works on: an ordered list of named tensors (views into their files), plus what a
 * user needs to know about everything else the file held. Every reader produces one; every writer
 * consumes one.
 */
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tensor/tensor_view.h"

namespace swavg {

// How a weight file's bytes are encoded (a shard's, a Hugging Face file's name): torch.save (ZIP or
// legacy), TorchScript, safetensors.
enum class file_format { torch, torchscript, safetensors };
const char* format_name(file_format f);  // "torch", "torchscript", "safetensors"

// What kind of input a state dict was read from: one row of the input table (formats/io/input_kinds.h,
// which names them). megatron is a refused kind.
enum class input_kind { torch, torch_legacy, torchscript, export_program, safetensors, hf, dcp, deepspeed, megatron };

enum class tensor_kind { unknown, parameter, buffer };
const char* kind_name(tensor_kind k);  // "unknown", "parameter", "buffer"

struct named_tensor {
  std::string name;
  tensor_view view;
  tensor_kind kind = tensor_kind::unknown;
};

// A value that is not a tensor: a non-tensor entry of the state dict ("epoch": 3) or an object
// swavg does not interpret, anywhere in the file ("args": argparse.Namespace).
struct other_entry {
  std::string path;   // dotted path from the top level ("args", "model.extra")
  std::string type;   // "int", "str", "argparse.Namespace", ...
  std::string value;  // short rendering for scalars and strings, else empty
};

// Pickle data a torch.save reader keeps for a writer to emit again, never to interpret: defined by
// formats/pickle/pickle.h, owned by the document the state dict holds.
struct pickle_node;
class pickle_document;

// A non-tensor entry of the state dict taken ("_extra_state", "epoch"), carried into outputs that
// can hold it as the same pickle data.
struct object_entry {
  std::string name;                  // the key as text (a non-string key reads as "<type>" or its int)
  std::string type;                  // "int", "dict", "argparse.Namespace", ...
  const pickle_node* key = nullptr;  // the key and the value, in `document`
  const pickle_node* value = nullptr;
  std::string file;  // the file it was read from, for messages
  // The name was changed (--strip-prefix, --layout averaged-model): a writer writes `name` as the
  // key, a string, instead of `key`.
  bool renamed = false;
  bool string_key = true;  // the key is a str (state dicts' keys are; an int key is not renamed)
};

// Gives a string-keyed entry a new name; a non-string key (an int) keeps its own.
void rename_entry(object_entry& e, std::string name);

struct state_dict {
  std::string path;                         // the file it came from
  file_format format = file_format::torch;  // the encoding of its weight files
  input_kind kind = input_kind::torch;      // the input it was read as (set by formats/io/input_kinds.h)
  std::string key;                          // dotted path of the dict taken ("" for the top level)
  std::vector<named_tensor> tensors;
  std::vector<other_entry> others;                  // non-tensor entries inside the dict taken
  std::vector<object_entry> objects;                // the same entries as pickle data, for writers
  std::shared_ptr<const pickle_document> document;  // keeps `objects` alive
  std::vector<other_entry> opaque;                  // objects swavg does not interpret, anywhere in the file
  std::map<std::string, std::string> metadata;      // safetensors __metadata__ / swavg's own record
  // A sharded checkpoint's shards, in order: each file and its own metadata (`metadata` is the first's).
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> shard_metadata;
};

}  // namespace swavg

namespace swavg {

// Leaves out every tensor and non-tensor entry named one of `paths` or under one ("optimizer" leaves
// out "optimizer.state.0.exp_avg"). Throws usage_error naming the file when one of `paths` names
// nothing in it (a misspelt --exclude would otherwise average what it meant to leave out).
void exclude_entries(state_dict& sd, const std::vector<std::string>& paths);

// Removes each of `prefixes`, in the order given and once each, from the start of every name that
// starts with it: tensors, non-tensor entries (string keys) and the reported non-tensor entries, as
// torch.nn.modules.utils.consume_prefix_in_state_dict_if_present does, called once per prefix
// ("model.model.embed.weight" less "model." is "model.embed.weight"). A name equal to a prefix
// keeps it. Throws input_error when two names become equal.
void strip_prefixes(state_dict& sd, const std::vector<std::string>& prefixes);

}  // namespace swavg
