/*
 * The one table of the inputs swavg recognises: one row per kind, each with its name (as inspect,
 * --dry-run and the reports print it), its description (for messages), how it is claimed from a
 * probe of the path (a folder's files, or a file's first bytes), how it is read and which files it
 * reads. The rows are in probe order, written once here: the folder kinds first (a Megatron-core
 * folder before DCP, whose folder it also is; DeepSpeed; a Hugging Face folder or index), then the
 * file kinds by their first bytes (a ZIP archive is torch.save or, with code/, TorchScript or, with
 * archive_format, a torch.export program; a
 * safetensors header, or a .safetensors name; a legacy pickle stream). The claims exclude each
 * other (tests/test_input_kinds.cpp checks every row against every row's fixture); a path is
 * answered by the first row that claims it, one no row claims is an input_error naming it (an
 * unclaimed folder gets the Hugging Face lookup's account of what it holds). A refused kind
 * (Megatron-core) has a row too: claimed like any other, its read throws, saying what to do.
 */
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "formats/hf/sharded_input.h"
#include "tensor/state_dict.h"

namespace swavg {

class mapped_file;

struct load_options {
  std::string key;                          // dotted path to the state dict in a torch.save object
  std::vector<std::string> exclude;         // entries left out (and all under ENTRY.), before stripping
  std::vector<std::string> strip_prefixes;  // removed once each from the start of every name
};

// What a row's claim looks at: the path, and either that it is a folder or the file mapped.
struct input_probe {
  std::string path;
  bool folder = false;
  std::shared_ptr<const mapped_file> file;  // a file's mapping (its first bytes), null for a folder
};

struct input_row {
  input_kind kind;
  const char* name;         // "torch", "dcp", ...
  const char* description;  // "a torch.save checkpoint", ...
  const char* claimed_by;   // how the probe claims it, in words
  bool (*claims)(const input_probe& p);
  // Reads the claimed input (throws input_error for a refused kind, naming what to do).
  state_dict (*read)(const input_probe& p, const load_options& options);
  // Every file a read of `path` opens, for the output-path checks.
  std::vector<std::string> (*files)(const std::string& path);
  // Whether the checkpoint's other files (config.json, ...) sit beside it, for a folder output to
  // copy (output_source_of): a Hugging Face folder's do; a DCP or DeepSpeed folder's are the run's.
  bool has_source_folder;
  // Claimed by a file's first bytes: one weight file (also a Hugging Face checkpoint's shard), the
  // one file its read opens.
  bool weight_file;
  // What a claimed checkpoint that a trainer may still be writing waits for beyond what its read
  // checks ("" when nothing; null for every kind whose read is the whole test): a Hugging Face
  // Trainer's checkpoint-N/ is whole once its trainer_state.json, written last, is. A DCP folder is
  // claimed only once DCP has renamed its .metadata into place, last; a ZIP's end records and a
  // safetensors header that agrees with the file's size are checked by their reads.
  std::string (*waits_for)(const std::string& path);
};

// The rows, in probe order, one per input_kind.
const std::vector<input_row>& input_rows();
const input_row& input_row_of(input_kind kind);
const char* input_kind_name(input_kind kind);         // "torch", "torch-legacy", "torchscript", ...
const char* input_kind_description(input_kind kind);  // "a torch.save checkpoint", ...

// Probes `path` (a folder, or a file mapped) and returns the first row that claims it. Throws
// io_error for a missing or unreadable path, input_error for one no row claims (an empty file or
// folder, unknown bytes), naming it.
const input_row& claim_input(const input_probe& probe);
input_probe probe_input(const std::string& path);
input_kind detect_input_kind(const std::string& path);
// What `path`, claimed by `row`, still waits for (input_row::waits_for), "" when nothing.
std::string waits_for(const input_row& row, const std::string& path);
// The row a path claims by its name and its folder alone, without reading a file's bytes: a folder
// kind or an index file; nullptr for any other file (one of the weight_file rows, which read that
// file alone). Throws input_error for a folder no row claims.
const input_row* claim_by_path(const std::string& path);

}  // namespace swavg
