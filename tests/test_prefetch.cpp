// The fold's read-ahead (fold/prefetch.h): how much is asked for, and when, on real mapped files;
// the default total and where it comes from.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fold/prefetch.h"
#include "util/mapped_file.h"

using namespace swavg;

namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr int64_t kElements = 1 << 20;  // 4 MiB of float32 per tensor

struct inputs {
  std::vector<std::shared_ptr<const mapped_file>> files;
  std::vector<std::vector<tensor_view>> views;  // [input][tensor]
  std::vector<tensor_plan> plans;
  std::vector<std::string> paths;

  explicit inputs(int n_inputs, int n_tensors) {
    for (int i = 0; i < n_inputs; ++i) {
      char name[] = "/tmp/swavg_prefetch_XXXXXX";
      const int fd = ::mkstemp(name);
      ::close(fd);
      paths.push_back(name);
      std::ofstream(name, std::ios::binary) << std::string(n_tensors * kElements * 4, '\1');
      files.push_back(mapped_file::open(name));
      views.emplace_back();
      for (int k = 0; k < n_tensors; ++k) {
        tensor_view v;
        v.shape = {kElements};
        v.strides = {1};
        v.storage = files.back()->data() + k * kElements * 4;
        v.storage_bytes = kElements * 4;
        v.mapping = files.back().get();
        views.back().push_back(v);
      }
    }
    plans.resize(n_tensors);
    for (int k = 0; k < n_tensors; ++k)
      for (int i = 0; i < n_inputs; ++i) plans[k].sources.push_back(fold_source{static_cast<size_t>(i), &views[i][k]});
  }
  ~inputs() {
    for (const auto& p : paths) ::unlink(p.c_str());
  }
  std::vector<const tensor_plan*> order() const {
    std::vector<const tensor_plan*> o;
    for (const auto& p : plans) o.push_back(&p);
    return o;
  }
};

}  // namespace

TEST_CASE("read-ahead keeps a window ahead of the fold on every input", "[prefetch]") {
  inputs in(2, 3);
  prefetcher ahead(in.order(), 8 * kMiB);
  REQUIRE(ahead.window() == 4 * kMiB);
  CHECK(ahead.bytes_requested() == 0);
  ahead.start(in.plans[0]);
  CHECK(ahead.bytes_requested() == 2 * 4 * kMiB);  // the first tensor of each input
  ahead.advance(in.plans[0], kElements / 2);
  CHECK(ahead.bytes_requested() == 2 * 6 * kMiB);
  ahead.advance(in.plans[0], kElements / 2);  // nothing new read: nothing new asked
  CHECK(ahead.bytes_requested() == 2 * 6 * kMiB);
  ahead.start(in.plans[1]);
  CHECK(ahead.bytes_requested() == 2 * 8 * kMiB);
  ahead.advance(in.plans[2], kElements);
  CHECK(ahead.bytes_requested() == 2 * 12 * kMiB);  // all of it, never more
  ahead.start(in.plans[2]);
  CHECK(ahead.bytes_requested() == 2 * 12 * kMiB);
}

TEST_CASE("read-ahead: the window per file and its bounds", "[prefetch]") {
  inputs in(2, 1);
  CHECK(prefetcher(in.order(), 0).window() == 0);
  CHECK(prefetcher(in.order(), 1).window() == 1);  // never more than the total
  CHECK(prefetcher(in.order(), 2 * kPrefetchMinPerFile - 1).window() == kPrefetchMinPerFile);
  CHECK(prefetcher(in.order(), 2 * kPrefetchMinPerFile).window() == kPrefetchMinPerFile);
  CHECK(prefetcher(in.order(), 2 * kPrefetchMaxPerFile).window() == kPrefetchMaxPerFile);
  CHECK(prefetcher(in.order(), 2 * kPrefetchMaxPerFile + 2).window() == kPrefetchMaxPerFile);
  prefetcher off(in.order(), 0);
  off.start(in.plans[0]);
  CHECK(off.bytes_requested() == 0);
}

TEST_CASE("read-ahead follows a worker's share, not the whole plan", "[prefetch]") {
  inputs in(2, 3);
  prefetcher ahead({&in.plans[2]}, 2 * kMiB * 100);
  ahead.start(in.plans[0]);  // not in the share: nothing
  CHECK(ahead.bytes_requested() == 0);
  ahead.start(in.plans[2]);
  CHECK(ahead.bytes_requested() == 2 * 4 * kMiB);  // the share's bytes only
}

TEST_CASE("read-ahead default: on below a file's smallest window of kernel readahead, else off", "[prefetch]") {
  CHECK(default_prefetch_total(std::nullopt) == 0);  // not known (no block device): off
  CHECK(default_prefetch_total(0) == kPrefetchDefaultTotal);
  CHECK(default_prefetch_total(128) == kPrefetchDefaultTotal);
  CHECK(default_prefetch_total(4095) == kPrefetchDefaultTotal);  // last on
  CHECK(default_prefetch_total(4096) == 0);                      // first off: 4 MiB, kPrefetchMinPerFile
  CHECK(default_prefetch_total(8192) == 0);
  CHECK(kPrefetchDefaultTotal == 134217728);
  CHECK(kPrefetchMinPerFile == 4096 * 1024);
}

TEST_CASE("read-ahead default: read_ahead_kb of the device a file is on", "[prefetch]") {
  CHECK_FALSE(read_ahead_kb_of("/nonexistent/swavg_prefetch").has_value());
  CHECK_FALSE(read_ahead_kb_of("/proc/self/status").has_value());  // procfs: no device, no bdi
  inputs in(1, 1);
  struct stat st {};
  REQUIRE(::stat(in.paths[0].c_str(), &st) == 0);
  std::ifstream queue("/sys/dev/block/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)) +
                      "/queue/read_ahead_kb");
  uint64_t kb = 0;
  if (queue >> kb) CHECK(read_ahead_kb_of(in.paths[0]) == kb);  // /tmp on a whole disk (else a partition, tmpfs)
}

TEST_CASE("read-ahead default: the smallest read_ahead_kb of the inputs' files, each asked once", "[prefetch]") {
  inputs in(3, 2);
  std::map<std::string, int> asked;
  const auto lookup = [&](const std::vector<std::optional<uint64_t>>& kb) {
    return [&asked, &in, kb](const std::string& path) -> std::optional<uint64_t> {
      ++asked[path];
      for (size_t i = 0; i < in.paths.size(); ++i)
        if (in.paths[i] == path) return kb[i];
      return std::nullopt;
    };
  };
  CHECK(smallest_read_ahead_kb(in.order(), lookup({8192, 128, 4096})) == 128);  // not the largest, not the first
  CHECK(asked.size() == 3);
  for (const auto& [path, n] : asked) CHECK(n == 1);  // two tensors per file, one lookup
  CHECK(smallest_read_ahead_kb(in.order(), lookup({std::nullopt, 8192, std::nullopt})) ==
        8192);  // unknown ones skipped
  CHECK(smallest_read_ahead_kb(in.order(), lookup({4096, 8192, 0})) == 0);
  CHECK_FALSE(smallest_read_ahead_kb(in.order(), lookup({std::nullopt, std::nullopt, std::nullopt})).has_value());
  CHECK_FALSE(smallest_read_ahead_kb({}, lookup({1, 2, 3})).has_value());
}

TEST_CASE("read-ahead: SWAVG_PREFETCH_BYTES over the default", "[prefetch]") {
  inputs in(2, 1);
  const char* saved = std::getenv("SWAVG_PREFETCH_BYTES");
  const std::string restore = saved ? saved : "";
  ::setenv("SWAVG_PREFETCH_BYTES", "16777216", 1);
  CHECK(prefetcher(in.order()).window() == 8 * kMiB);
  ::setenv("SWAVG_PREFETCH_BYTES", "0", 1);
  CHECK(prefetcher(in.order()).window() == 0);
  ::unsetenv("SWAVG_PREFETCH_BYTES");
  const uint64_t total = default_prefetch_total(read_ahead_kb_of(in.paths[0]));
  CHECK(prefetcher(in.order()).window() == (total == 0 ? 0 : total / 2));
  if (saved) ::setenv("SWAVG_PREFETCH_BYTES", restore.c_str(), 1);
}
