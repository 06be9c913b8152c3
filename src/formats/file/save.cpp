#include "formats/file/save.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "formats/safetensors/safetensors.h"
#include "formats/torch/torch_file.h"
#include "formats/torch/torch_writer.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/text.h"

namespace swavg {

void refuse_folder_format(const std::string& path, output_format format) {
  if (format == output_format::dcp)
    throw usage_error(
        fmt::format("{}: --format dcp writes a Distributed Checkpoint folder, not one file; give "
                    "the folder with a trailing slash: -o {}/",
                    path, path));
}

void refuse_shard_size(const std::string& path, output_format format) {
  if (format == output_format::dcp)
    throw usage_error(
        fmt::format("{}: --max-shard-size sizes Hugging Face shards; a DCP output has one file per rank "
                    "of the first input (or one), so drop --max-shard-size or --format dcp",
                    path));
}

output_format choose_output_format(const std::string& path, std::optional<output_format> requested) {
  if (requested) return *requested;
  if (ends_with(path, ".pt2"))
    throw usage_error(
        fmt::format("{}: a .pt2 name is a torch.export program's, which swavg does not write; name the "
                    "weights .pt or .safetensors (load them with ep.module().load_state_dict), or give "
                    "--format torch to keep the name",
                    path));
  return has_safetensors_extension(path) ? output_format::safetensors : output_format::torch;
}

void check_objects_fit(const std::string& path, output_format format, const std::vector<object_entry>& objects) {
  if (format == output_format::torch || objects.empty()) return;
  std::vector<std::string> names;
  for (const auto& o : objects) names.push_back(fmt::format("{} ({})", o.name, o.type));
  if (format == output_format::dcp)
    throw usage_error(
        fmt::format("{}: swavg's DCP output holds tensors only, not the non-tensor entries {}; pass --drop-objects "
                    "to leave them out",
                    path, quoted_list(names)));
  throw usage_error(
      fmt::format("{}: safetensors holds tensors only, not the non-tensor entries {}; write torch.save "
                  "(--format torch) to keep them or pass --drop-objects to leave them out",
                  path, quoted_list(names)));
}

std::map<std::string, std::string> inherited_metadata(const std::vector<const state_dict*>& inputs) {
  std::map<std::string, std::string> out;
  for (const state_dict* sd : inputs)
    if (sd && sd->format == file_format::safetensors)
      for (const auto& [k, v] : sd->metadata)
        if (k.rfind("swavg", 0) != 0) out[k] = v;
  out.emplace("format", "pt");
  return out;
}

uint64_t save_state_dict(const std::string& path, const std::vector<named_tensor>& tensors, output_format format,
                         const std::map<std::string, std::string>& metadata, const std::vector<object_entry>& objects) {
  refuse_folder_format(path, format);
  check_objects_fit(path, format, objects);
  atomic_file out(path);
  if (format == output_format::torch) {
    std::map<std::string, std::string> records;
    if (!metadata.empty()) records[kSwavgRecord] = nlohmann::json(metadata).dump(1);
    write_torch_state_dict(out, tensors, objects, records);
  } else {
    std::vector<tensor_spec> specs;
    specs.reserve(tensors.size());
    for (const auto& t : tensors) specs.push_back({t.name, t.view.type, t.view.shape, std::nullopt});
    safetensors_writer writer(out, specs, metadata);
    for (const auto& t : tensors) {
      if (t.view.is_contiguous()) {
        writer.write(t.view.data(), t.view.nbytes());
      } else {
        std::vector<uint8_t> c(t.view.nbytes());
        gather_contiguous(t.view, c.data());
        writer.write(c.data(), c.size());
      }
    }
    writer.finish();
  }
  out.commit();
  return out.tell();
}

namespace {

// Bounds of the torch.save archive's parts besides the tensor data (zip_writer.cpp, torch_writer.cpp):
// a record's local and central headers with ZIP64 extras and alignment, and a tensor's entry in data.pkl.
constexpr uint64_t kRecordBound = 30 + 24 + 63 + 46 + 28 + 2 * 32;
constexpr uint64_t kPickleEntryBound = 160;
constexpr uint64_t kPickleDimBound = 2 * 10;
constexpr uint64_t kArchiveBound = 4 * kRecordBound + 22 + 56 + 20 + 64;

}  // namespace

planned_size planned_file_size(const std::string& path, output_format format, const std::vector<tensor_spec>& specs,
                               const std::map<std::string, std::string>& metadata,
                               const std::vector<object_entry>& objects) {
  check_objects_fit(path, format, objects);
  if (format == output_format::safetensors) {
    return planned_size{safetensors_file_size(path, specs, metadata), true};
  }
  planned_size size{kArchiveBound, false};
  if (!metadata.empty()) size.bytes += kRecordBound + nlohmann::json(metadata).dump(1).size();
  for (const auto& t : specs) {
    size.bytes += kPickleEntryBound + t.name.size() + kPickleDimBound * 2 * t.shape.size();
    if (t.alias_of) continue;
    uint64_t n = itemsize(t.type);
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    size.bytes += kRecordBound + n;
  }
  return size;
}

struct tensor_sink::impl {
  atomic_file out;
  output_format format;
  std::vector<tensor_spec> specs;
  std::map<std::string, std::string> metadata;
  std::unique_ptr<torch_writer> torch;
  std::unique_ptr<safetensors_writer> safetensors;
  std::vector<std::string> storage_keys;  // torch: each spec's storage record
  size_t current = 0;                     // index of the tensor being written
  uint64_t remaining = 0;                 // its bytes still to come
  bool open = false;

  impl(const std::string& path, output_format f, std::vector<tensor_spec> s,
       const std::map<std::string, std::string>& m, const std::vector<object_entry>& objects, bool hashed)
      : out((refuse_folder_format(path, f), path)), format(f), specs(std::move(s)), metadata(m) {
    check_objects_fit(path, format, objects);
    if (hashed) out.hash_contents();
    for (size_t i = 0; i < specs.size(); ++i)
      if (specs[i].alias_of && (format != output_format::torch || *specs[i].alias_of >= i))
        throw error(exit_code::internal, fmt::format("tensor_sink: bad alias for '{}'", specs[i].name));
    if (format == output_format::torch) {
      torch = std::make_unique<torch_writer>(out);
      torch->add_objects(objects);
      storage_keys.resize(specs.size());
    } else {
      safetensors = std::make_unique<safetensors_writer>(out, specs, metadata);
    }
  }

  uint64_t nbytes(const tensor_spec& t) const {
    uint64_t n = itemsize(t.type);
    for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
    return n;
  }

  // Opens the next tensor (torch: a storage record); zero-byte tensors open and close at once.
  void advance() {
    while (!open && current < specs.size()) {
      const tensor_spec& t = specs[current];
      if (t.alias_of) {
        storage_keys[current] = storage_keys[*t.alias_of];
        torch->add_tensor(t.name, storage_keys[current], 0, t.shape, contiguous_strides(t.shape));
        ++current;
        continue;
      }
      remaining = nbytes(t);
      if (torch) {
        storage_keys[current] = torch->begin_storage(t.type, remaining);
        torch->add_tensor(t.name, storage_keys[current], 0, t.shape, contiguous_strides(t.shape));
      }
      open = true;
      if (remaining == 0) close();
    }
  }

  void close() {
    if (torch) torch->end_storage();
    open = false;
    ++current;
  }
};

tensor_sink::tensor_sink(const std::string& path, output_format format, std::vector<tensor_spec> specs,
                         const std::map<std::string, std::string>& metadata, const std::vector<object_entry>& objects,
                         bool hashed)
    : impl_(std::make_unique<impl>(path, format, std::move(specs), metadata, objects, hashed)) {
  impl_->advance();
}

tensor_sink::~tensor_sink() = default;

void tensor_sink::write(const void* data, uint64_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    if (!impl_->open) throw error(exit_code::internal, "tensor_sink: more bytes than the declared tensors hold");
    uint64_t n = std::min(size, impl_->remaining);
    if (impl_->torch)
      impl_->torch->write(p, n);
    else
      impl_->safetensors->write(p, n);
    p += n;
    size -= n;
    impl_->remaining -= n;
    if (impl_->remaining == 0) {
      impl_->close();
      impl_->advance();
    }
  }
}

void tensor_sink::commit() {
  if (impl_->open || impl_->current != impl_->specs.size())
    throw error(exit_code::internal, "tensor_sink: committed before all tensors were written");
  if (impl_->torch) {
    if (!impl_->metadata.empty()) impl_->torch->add_record(kSwavgRecord, nlohmann::json(impl_->metadata).dump(1));
    impl_->torch->finish();
  } else {
    impl_->safetensors->finish();
  }
  impl_->out.commit();
}

uint64_t tensor_sink::bytes_written() const { return impl_->out.tell(); }

const std::string& tensor_sink::digest() const { return impl_->out.digest(); }

tensor_sinks::tensor_sinks(const std::vector<std::string>& paths, output_format format,
                           const std::vector<tensor_spec>& specs,
                           const std::vector<std::map<std::string, std::string>>& metadata,
                           const std::vector<object_entry>& objects)
    : paths_(paths) {
  for (size_t i = 0; i < paths.size(); ++i)
    sinks_.push_back(std::make_unique<tensor_sink>(paths[i], format, specs, metadata.at(i), objects));
}

void tensor_sinks::write(const void* data, uint64_t size) {
  for (auto& sink : sinks_) sink->write(data, size);
}

void tensor_sinks::write_to(size_t file, const void* data, uint64_t size) { sinks_.at(file)->write(data, size); }

void tensor_sinks::commit() {
  size_t done = 0;
  try {
    for (; done < sinks_.size(); ++done) sinks_[done]->commit();
  } catch (...) {
    for (size_t s = 0; s < done; ++s) std::remove(paths_[s].c_str());
    throw;
  }
}

uint64_t tensor_sinks::bytes_written() const {
  uint64_t bytes = 0;
  for (const auto& s : sinks_) bytes += s->bytes_written();
  return bytes;
}

uint64_t tensor_sinks::bytes_written(size_t file) const { return sinks_.at(file)->bytes_written(); }

}  // namespace swavg
