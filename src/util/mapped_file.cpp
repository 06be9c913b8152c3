#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <mutex>
#include <vector>

#include "util/error.h"
#include "util/regular_file.h"
#include "util/sigbus_guard.h"

namespace swavg {
namespace {

// A file released in more than kBatchAfter pieces (a checkpoint of many tiny tensors) gathers
// small neighbouring releases up to kReleaseBatch bytes and drops them in one call: dropping the
// mapping around each tiny tensor costs a system call and a refault of the same folio for the next
// one. A file with a batch open keeps about one large folio mapped, so at most kMaxBatchingFiles
// do at a time; checkpoints of usual tensor counts never batch.
constexpr uint64_t kReleaseBatch = 1024 * 1024;
constexpr uint64_t kBatchAfter = 4096;
constexpr int kMaxBatchingFiles = 8;
int batching_files = 0;

// The live mappings (for check_all_unchanged and fault_at) and the first file that faulted.
struct registry {
  std::mutex mutex;
  std::vector<const mapped_file*> live;
  std::optional<std::string> first_faulted;
};

registry& files() {
  static registry* r = new registry();  // never destroyed: mappings may outlive static destruction
  return *r;
}

bool same_time(const timespec& a, const timespec& b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }

std::string changed_message(const std::string& path, const std::string& how) {
  return fmt::format("{}: changed while being read ({})", path, how);
}

}  // namespace

std::shared_ptr<const mapped_file> mapped_file::open(const std::string& path) {
  const regular_file file = regular_file::open(path);
  const struct stat& st = file.status();

  std::shared_ptr<mapped_file> m(new mapped_file());
  m->path_ = path;
  m->size_ = static_cast<size_t>(st.st_size);
  if (m->size_ == 0) return m;
  void* p = ::mmap(nullptr, m->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, file.fd(), 0);
  if (p == MAP_FAILED) throw io_error(fmt::format("{}: cannot map {} bytes: {}", path, m->size_, errno_text(errno)));
  m->data_ = static_cast<const uint8_t*>(p);
  m->mapped_ = true;
  m->dev_ = st.st_dev;
  m->ino_ = st.st_ino;
  m->mtime_ = st.st_mtim;
  m->ctime_ = st.st_ctim;
  m->guard_ = guard_range(p, m->size_);
  registry& r = files();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.live.push_back(m.get());
  return m;
}

std::shared_ptr<const mapped_file> mapped_file::from_memory(std::string bytes, const std::string& path) {
  std::shared_ptr<mapped_file> m(new mapped_file());
  m->owned_ = std::move(bytes);
  m->path_ = path;
  m->size_ = m->owned_.size();
  m->data_ = reinterpret_cast<const uint8_t*>(m->owned_.data());
  return m;
}

mapped_file::~mapped_file() {
  if (pending_end_ > pending_begin_) --batching_files;
  if (!mapped_) return;
  {
    registry& r = files();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.live.erase(std::find(r.live.begin(), r.live.end(), this));
    if (faulted() && !r.first_faulted) r.first_faulted = path_;
  }
  unguard_range(guard_);
  ::munmap(const_cast<uint8_t*>(data_), size_);
}

bool mapped_file::faulted() const { return range_faulted(guard_); }

void mapped_file::throw_if_faulted() const {
  if (faulted()) throw io_error(changed_message(path_, "it shrank, or a page of it could not be read"));
}

void mapped_file::check_unchanged() const {
  throw_if_faulted();
  if (!mapped_) return;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0)
    throw io_error(changed_message(path_, fmt::format("it can no longer be opened: {}", errno_text(errno))));
  if (st.st_dev != dev_ || st.st_ino != ino_) throw io_error(changed_message(path_, "it was replaced by another file"));
  if (static_cast<uint64_t>(st.st_size) != size_)
    throw io_error(changed_message(path_, fmt::format("{} bytes at open, {} now", size_, st.st_size)));
  if (!same_time(st.st_mtim, mtime_) || !same_time(st.st_ctim, ctime_))
    throw io_error(changed_message(path_, "it was modified"));
}

void mapped_file::check_all_unchanged() {
  registry& r = files();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const mapped_file* m : r.live) m->check_unchanged();
}

std::optional<std::string> mapped_file::fault_at(const void* p) {
  registry& r = files();
  std::lock_guard<std::mutex> lock(r.mutex);
  const guarded_range* range = mark_faulted_at(p);
  if (range == nullptr) return std::nullopt;
  for (const mapped_file* m : r.live)
    if (m->guard_ == range) {
      if (!r.first_faulted) r.first_faulted = m->path_;
      return m->path_;
    }
  return std::nullopt;
}

std::optional<std::string> mapped_file::first_faulted() {
  registry& r = files();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (!r.first_faulted)
    for (const mapped_file* m : r.live)
      if (m->faulted()) return m->path_;
  return r.first_faulted;
}

void mapped_file::forget_faults() {
  registry& r = files();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.first_faulted.reset();
}

void mapped_file::will_need(uint64_t offset, uint64_t length) const {
  if (!mapped_ || offset >= size_) return;
  long page = ::sysconf(_SC_PAGESIZE);
  uint64_t start = offset / page * page;
  uint64_t end = std::min<uint64_t>(size_, offset + length);
  ::madvise(const_cast<uint8_t*>(data_) + start, end - start, MADV_WILLNEED);
}

// How far from a touched byte the kernel may map file pages along with it: fault-around maps 64 KiB
// windows, and a large page-cache folio (ext4 and XFS on recent kernels) is mapped whole, up to a
// PMD, 2 MiB on x86-64. Measured on Linux 6.18/ext4: reading one byte maps 2 MiB.
constexpr uint64_t kMapAround = 2 * 1024 * 1024;

void mapped_file::release_pages(uint64_t begin, uint64_t end) const {
  if (!mapped_ || begin >= size_) return;
  end = std::min<uint64_t>(end, size_);
  const bool open = pending_end_ > pending_begin_;
  if (open) {
    const uint64_t lo = std::min(begin, pending_begin_), hi = std::max(end, pending_end_);
    if (begin <= pending_end_ + kMapAround && end + kMapAround >= pending_begin_ && hi - lo < kReleaseBatch) {
      pending_begin_ = lo;
      pending_end_ = hi;
      return;
    }
    drop(pending_begin_, pending_end_);
  }
  const bool small = end - begin < kReleaseBatch;
  const bool batch = small && (open || (++releases_ > kBatchAfter && batching_files < kMaxBatchingFiles));
  if (!batch) {
    drop(begin, end);
    if (open) --batching_files;
    pending_begin_ = pending_end_ = 0;
    return;
  }
  if (!open) ++batching_files;
  pending_begin_ = begin;
  pending_end_ = end;
}

void mapped_file::drop(uint64_t begin, uint64_t end) const {
  static const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  begin = (begin > kMapAround ? begin - kMapAround : 0) / page * page;
  end = std::min<uint64_t>(size_, std::min<uint64_t>(end, size_) + kMapAround);
  if (end > begin) ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
}

}  // namespace swavg
