#include "fold/prefetch.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <unordered_set>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "util/mapped_file.h"

namespace swavg {
namespace {

uint64_t total_from_environment(const std::vector<const tensor_plan*>& order) {
  const char* text = std::getenv("SWAVG_PREFETCH_BYTES");
  if (text != nullptr && *text != '\0') {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (*end == '\0') return v;
    spdlog::warn("SWAVG_PREFETCH_BYTES='{}' is not a number of bytes; using the default", text);
  }
  const auto kb = smallest_read_ahead_kb(order, read_ahead_kb_of);
  const uint64_t total = default_prefetch_total(kb);
  spdlog::debug("read-ahead default: {} bytes (inputs' read_ahead_kb {})", total, kb ? std::to_string(*kb) : "unknown");
  return total;
}

}  // namespace

uint64_t default_prefetch_total(std::optional<uint64_t> read_ahead_kb) {
  if (!read_ahead_kb) return 0;
  return *read_ahead_kb < (kPrefetchMinPerFile >> 10) ? kPrefetchDefaultTotal : 0;
}

std::optional<uint64_t> read_ahead_kb_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  const unsigned ma = major(st.st_dev), mi = minor(st.st_dev);
  // A partition has no queue/ of its own: its disk's is one folder up.
  for (const std::string& f : {fmt::format("/sys/dev/block/{}:{}/queue/read_ahead_kb", ma, mi),
                               fmt::format("/sys/dev/block/{}:{}/../queue/read_ahead_kb", ma, mi),
                               fmt::format("/sys/class/bdi/{}:{}/read_ahead_kb", ma, mi)}) {
    std::ifstream in(f);
    uint64_t kb = 0;
    if (in >> kb) return kb;
  }
  return std::nullopt;
}

std::optional<uint64_t> smallest_read_ahead_kb(const std::vector<const tensor_plan*>& order,
                                               const read_ahead_lookup& lookup) {
  std::unordered_set<const mapped_file*> seen;
  std::optional<uint64_t> smallest;
  const auto visit = [&](const tensor_view* v) {
    if (v == nullptr || v->mapping == nullptr || !v->mapping->mapped() || !seen.insert(v->mapping).second) return;
    const auto kb = lookup(v->mapping->path());
    if (kb && (!smallest || *kb < *smallest)) smallest = kb;
  };
  for (const tensor_plan* p : order) {
    visit(p->resumed);
    for (const auto& s : p->sources) visit(s.view);
  }
  return smallest;
}

prefetcher::prefetcher(const std::vector<const tensor_plan*>& order)
    : prefetcher(order, total_from_environment(order)) {}

prefetcher::prefetcher(const std::vector<const tensor_plan*>& order, uint64_t total_bytes) {
  if (total_bytes == 0) return;  // off: no tables to build for every tensor
  uses_.resize(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    index_.emplace(order[k], k);
    if (order[k]->resumed) add_view(k, *order[k]->resumed);
    for (const auto& s : order[k]->sources) add_view(k, *s.view);
  }
  if (streams_.empty()) return;
  window_ = std::clamp<uint64_t>(total_bytes / streams_.size(), kPrefetchMinPerFile, kPrefetchMaxPerFile);
  window_ = std::min(window_, total_bytes);
  spdlog::debug("read-ahead: {} bytes ahead on each of {} files", window_, streams_.size());
}

void prefetcher::add_view(size_t k, const tensor_view& v) {
  if (v.pieces) {  // assembled whole when its tensor starts, piece by piece
    for (const tensor_piece& p : *v.pieces) add_view(k, p.view, true);
    return;
  }
  add_view(k, v, !v.is_contiguous());
}

void prefetcher::add_view(size_t k, const tensor_view& v, bool gathered) {
  if (v.mapping == nullptr || !v.mapping->mapped() || v.numel() == 0) return;
  const bool whole_storage = !v.is_contiguous();  // a strided view's storage is read whole
  const uint8_t* begin = whole_storage ? v.storage : v.data();
  const uint64_t length = whole_storage ? v.storage_bytes : v.nbytes();
  auto [it, added] = stream_of_.emplace(v.mapping, streams_.size());
  if (added) streams_.push_back(stream{v.mapping, {}});
  stream& s = streams_[it->second];
  s.ranges.push_back(range{static_cast<uint64_t>(begin - v.mapping->data()), length});
  uses_[k].push_back(use{it->second, s.listed, length, gathered ? 0 : itemsize(v.type)});
  s.listed += length;
}

void prefetcher::advance(const tensor_plan& p, int64_t elements) {
  if (window_ == 0) return;
  const auto it = index_.find(&p);
  if (it == index_.end()) return;
  for (const use& u : uses_[it->second]) {
    stream& s = streams_[u.stream];
    // A strided view is gathered whole when its tensor starts.
    const uint64_t done =
        u.itemsize == 0 ? u.length : std::min<uint64_t>(u.length, static_cast<uint64_t>(elements) * u.itemsize);
    s.consumed = std::max(s.consumed, u.before + done);
    top_up(s);
  }
}

void prefetcher::top_up(stream& s) {
  while (s.next < s.ranges.size() && s.requested < s.consumed + window_) {
    const range& r = s.ranges[s.next];
    const uint64_t piece = std::min({kPrefetchPiece, r.length - s.next_done, s.consumed + window_ - s.requested});
    s.file->will_need(r.offset + s.next_done, piece);
    s.next_done += piece;
    s.requested += piece;
    requested_ += piece;
    if (s.next_done == r.length) {
      ++s.next;
      s.next_done = 0;
    }
  }
}

}  // namespace swavg
