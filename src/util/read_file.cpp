#include "util/read_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <vector>

#include "util/error.h"

namespace swavg {

void read_chunks(const std::string& path, size_t chunk, const std::function<bool(const char*, size_t)>& take) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw io_error(fmt::format("{}: cannot open: {}", path, errno_text(errno)));
  std::vector<char> buf(chunk);
  try {
    for (;;) {
      const ssize_t n = ::read(fd, buf.data(), buf.size());
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw io_error(fmt::format("{}: read failed: {}", path, errno_text(errno)));
      if (n == 0 || !take(buf.data(), static_cast<size_t>(n))) break;
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

std::string read_text_file(const std::string& path, uint64_t max_size) {
  std::string out;
  read_chunks(path, 65536, [&](const char* data, size_t n) {
    out.append(data, n);
    if (out.size() > max_size) throw input_error(fmt::format("{}: larger than {} bytes", path, max_size));
    return true;
  });
  return out;
}

}  // namespace swavg
