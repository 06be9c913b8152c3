/*
 * A Hugging Face folder's plan, and its shards written one after the other as their bytes arrive
 * (sharded_output.h).
 */
#include "formats/hf/sharded_output.h"

#include <algorithm>

#include <fmt/format.h>

#include "formats/hf/sharded_input.h"
#include "util/error.h"

namespace swavg {

sharded_sink::sharded_sink(std::string folder, const shard_layout& layout,
                           const std::map<std::string, std::string>& metadata, size_t worker_index, size_t worker_count,
                           bool hashed)
    : folder_(std::move(folder)),
      layout_(layout),
      metadata_(metadata),
      spec_owned_(specs_owned(layout, worker_index, worker_count)),
      hashed_(hashed) {
  for (size_t s = 0; s < layout_.shards.size(); ++s)
    if (worker_owns(s, worker_index, worker_count)) owned_.push_back(s);
  open_next();
  close_full();
}

sharded_sink::~sharded_sink() = default;

void sharded_sink::open_next() {
  if (next_ >= owned_.size()) return;
  open_shard_ = owned_[next_++];
  const output_shard& s = layout_.shards[open_shard_];
  std::vector<tensor_spec> specs;
  specs.reserve(s.specs.size());
  for (size_t i : s.specs) specs.push_back(layout_.specs[i]);
  sink_ = std::make_unique<tensor_sink>(folder_ + "/" + s.file, layout_.format, std::move(specs), metadata_,
                                        std::vector<object_entry>{}, hashed_);
  remaining_ = s.bytes;
}

// Commits every open shard whose bytes have all arrived (zero-byte shards at once).
void sharded_sink::close_full() {
  while (sink_ && remaining_ == 0) {
    sink_->commit();
    const std::string& file = layout_.shards[open_shard_].file;
    files_.push_back(written_file{file, sink_->bytes_written(), sink_->digest()});
    bytes_written_ += sink_->bytes_written();
    sink_.reset();
    open_next();
  }
}

void sharded_sink::write(const void* data, uint64_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    if (!sink_) throw error(exit_code::internal, "sharded_sink: more bytes than this worker's shards hold");
    const uint64_t n = std::min(size, remaining_);
    sink_->write(p, n);
    p += n;
    size -= n;
    remaining_ -= n;
    close_full();
  }
}

void sharded_sink::commit() {
  if (sink_) throw error(exit_code::internal, "sharded_sink: committed before all shards were written");
}

hf_folder_writer::hf_folder_writer(hf_writer_options options) : options_(std::move(options)) {
  if (options_.source_index.empty()) return;
  const hf_index index = read_hf_index(options_.source_index);
  if (!index.total_parameters) return;
  total_parameters_ = index.total_parameters;
  counted_.reserve(index.weight_map.size());
  for (const auto& [tensor, shard] : index.weight_map) counted_.push_back(tensor);
  std::sort(counted_.begin(), counted_.end());
}

shard_layout hf_folder_writer::plan(std::vector<tensor_spec> specs, const std::map<std::string, std::string>&) const {
  const hf_writer_options& o = options_;
  shard_layout layout = plan_layout(o.format, std::move(specs), o.max_shard_size, o.names);
  if (layout.shards.size() > kMaxShards)
    throw usage_error(fmt::format("{}/: --max-shard-size {} makes {} shards, more than the {} a folder may have", o.out,
                                  o.max_shard_size, layout.shards.size(), kMaxShards));
  if (layout.shards.size() < 2) return layout;
  std::optional<uint64_t> total_parameters;
  if (total_parameters_) {
    std::vector<std::string> held;
    held.reserve(layout.specs.size());
    for (const auto& s : layout.specs) held.push_back(s.name);
    std::sort(held.begin(), held.end());
    if (held == counted_) total_parameters = total_parameters_;
  }
  layout.index_name = output_index_name(o.format, o.names);
  layout.index_bytes = index_json(layout, total_parameters);
  return layout;
}

std::unique_ptr<folder_sink> hf_folder_writer::open(const std::string& folder, const shard_layout& plan,
                                                    const std::map<std::string, std::string>& metadata,
                                                    size_t worker_index, size_t worker_count, bool hashed) const {
  return std::make_unique<sharded_sink>(folder, plan, metadata, worker_index, worker_count, hashed);
}

planned_size hf_folder_writer::planned_file_size(const std::string& folder, const shard_layout& plan, size_t s,
                                                 const std::map<std::string, std::string>& metadata) const {
  const output_shard& shard = plan.shards.at(s);
  std::vector<tensor_spec> specs;
  specs.reserve(shard.specs.size());
  for (size_t i : shard.specs) specs.push_back(plan.specs[i]);
  return swavg::planned_file_size(folder + "/" + shard.file, plan.format, specs, metadata);
}

}  // namespace swavg
