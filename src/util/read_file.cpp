#include "util/read_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <vector>

#include "util/error.h"
#include "util/regular_file.h"

namespace swavg {
namespace {

void read_all(const regular_file& file, size_t chunk, const std::function<bool(const char*, size_t)>& take) {
  std::vector<char> buf(chunk);
  for (;;) {
    const ssize_t n = ::read(file.fd(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw io_error(fmt::format("{}: read failed: {}", file.path(), errno_text(errno)));
    if (n == 0 || !take(buf.data(), static_cast<size_t>(n))) break;
  }
}

}  // namespace

void read_chunks(const std::string& path, size_t chunk, const std::function<bool(const char*, size_t)>& take) {
  read_all(regular_file::open(path), chunk, take);
}

std::string read_text_file(const std::string& path, uint64_t max_size, open_mode mode) {
  const regular_file file = regular_file::open(path, mode);
  const auto too_big = [&] { return input_error(fmt::format("{}: larger than {} bytes", path, max_size)); };
  if (static_cast<uint64_t>(file.status().st_size) > max_size) throw too_big();
  std::string out;
  read_all(file, 65536, [&](const char* data, size_t n) {
    out.append(data, n);
    if (out.size() > max_size) throw too_big();  // it grew while being read
    return true;
  });
  return out;
}

}  // namespace swavg
