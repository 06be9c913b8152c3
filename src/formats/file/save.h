/*
 * Writes a state dict as torch.save or safetensors, atomically. The format comes from --format or,
 * failing that, the output's extension (.safetensors; anything else is torch.save).
 *
 * Non-tensor entries (`object_entry`) go into torch.save outputs as the pickle data they were
 * read from; safetensors cannot hold them, and writing one there is an error naming them (the
 * caller drops them first with --drop-objects). safetensors outputs keep the inputs' own
 * __metadata__ (`inherited_metadata`) beside swavg's record.
 */
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "formats/core/output_format.h"
#include "formats/core/output_sink.h"
#include "tensor/state_dict.h"

namespace swavg {

// usage_error when `format` is a folder's (dcp) and `path` is to be one file.
void refuse_folder_format(const std::string& path, output_format format);
// usage_error for --max-shard-size with `format` dcp, whose files are the first input's ranks.
void refuse_shard_size(const std::string& path, output_format format);

// `requested` (--format) or else by the path's extension; a .pt2 name without --format is usage_error
// (torch.export's, which swavg does not write).
output_format choose_output_format(const std::string& path, std::optional<output_format> requested);

// Tensors may be strided views; safetensors gets them contiguous, torch.save keeps storages shared.
// `metadata` goes to safetensors' __metadata__ or to a swavg.json record in the torch archive,
// where loaders ignore it. Returns the number of bytes written.
uint64_t save_state_dict(const std::string& path, const std::vector<named_tensor>& tensors, output_format format,
                         const std::map<std::string, std::string>& metadata = {},
                         const std::vector<object_entry>& objects = {});

// Throws usage_error naming the entries when `format` cannot hold `objects` (safetensors, dcp).
void check_objects_fit(const std::string& path, output_format format, const std::vector<object_entry>& objects);

// The __metadata__ a safetensors output inherits from `inputs` (in order: a later one's value
// wins): every entry of their safetensors metadata but swavg's own (keys starting with "swavg"),
// and "format": "pt", which transformers requires, unless an input says otherwise.
std::map<std::string, std::string> inherited_metadata(const std::vector<const state_dict*>& inputs);

// The size of the file a tensor_sink of `specs`, `metadata` and `objects` writes, for plans
// (--dry-run): safetensors' exactly (the writer's own header code); torch.save's the data plus a
// bound on the archive's records and data.pkl (exact false), the objects' pickle not counted.
planned_size planned_file_size(const std::string& path, output_format format, const std::vector<tensor_spec>& specs,
                               const std::map<std::string, std::string>& metadata,
                               const std::vector<object_entry>& objects = {});

// Streams tensors to a torch.save or safetensors file in the order declared up front: write() the
// bytes of each tensor (contiguous, row-major; none for an alias) one after the other, then
// commit(). `objects` follow the tensors (torch.save only). Nothing appears at `path` before
// commit(); a sink destroyed before it leaves no trace. With `hashed`, digest() is the file's
// SHA-256 after commit().
class tensor_sink final : public output_sink {
 public:
  tensor_sink(const std::string& path, output_format format, std::vector<tensor_spec> specs,
              const std::map<std::string, std::string>& metadata, const std::vector<object_entry>& objects = {},
              bool hashed = false);
  ~tensor_sink() override;
  void write(const void* data, uint64_t size) override;
  void commit() override;
  uint64_t bytes_written() const override;
  bool owns(size_t) const override { return true; }  // every declared tensor
  const std::string& digest() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// Several files of the same tensors written in step, each a tensor_sink with its own metadata: write()
// gives every file the same bytes (a copied tensor), write_to() one file its own (an average of its
// own schedule). commit() renames every file into place, or none: one that fails removes those
// renamed before it. Several outputs of one read (posthoc-ema's targets, ema's decays) go here.
class tensor_sinks final : public output_sink {
 public:
  tensor_sinks(const std::vector<std::string>& paths, output_format format, const std::vector<tensor_spec>& specs,
               const std::vector<std::map<std::string, std::string>>& metadata,
               const std::vector<object_entry>& objects = {});
  void write(const void* data, uint64_t size) override;
  void write_to(size_t file, const void* data, uint64_t size);
  void commit() override;
  uint64_t bytes_written() const override;  // all files together
  uint64_t bytes_written(size_t file) const;
  bool owns(size_t) const override { return true; }

 private:
  std::vector<std::string> paths_;
  std::vector<std::unique_ptr<tensor_sink>> sinks_;
};

}  // namespace swavg
