/*
 * The shards of a sharded output, written one after the other as their bytes arrive (sharded_output.h).
 */
#include "formats/sharded_output.h"

#include <algorithm>

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

}  // namespace swavg
