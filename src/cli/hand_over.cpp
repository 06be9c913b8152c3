#include "cli/hand_over.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <spdlog/spdlog.h>
#include <string>
#include <vector>

#include "cli/input_list.h"

namespace swavg {
namespace {

constexpr const char* kHandedOver = "SWAVG_HANDED_OVER";

}  // namespace

int hand_over(int argc, char** argv, const needs_libtorch& why) {
  if (std::getenv(kHandedOver) != nullptr) {  // swavg-torch itself: never loop
    spdlog::error("internal error: {}", why.what());
    return static_cast<int>(exit_code::internal);
  }
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = n > 0 ? std::string(self, static_cast<size_t>(n)) : std::string(argv[0]);
  dir = dir.find('/') == std::string::npos ? "." : dir.substr(0, dir.rfind('/'));
  const std::string full = dir + "/swavg-torch";
  spdlog::debug("{}: running {}", why.what(), full);
  // The list already read from stdin goes along, as read, in a memory file named in place of '-'.
  std::vector<std::string> args(argv, argv + argc);
  if (const std::string* listed = stdin_inputs()) {
    const int fd = memfd_create("swavg-inputs", 0);
    const std::string& text = *listed;
    if (fd < 0 || write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size()) ||
        lseek(fd, 0, SEEK_SET) != 0) {
      spdlog::error("{}, and the --inputs-from list cannot be passed on: {}", why.what(), errno_text(errno));
      return static_cast<int>(exit_code::io);
    }
    const std::string named = "/dev/fd/" + std::to_string(fd);
    for (size_t i = 1; i < args.size(); ++i) {
      if (args[i] == "--inputs-from=-") args[i] = "--inputs-from=" + named;
      if (args[i] == "-" && args[i - 1] == "--inputs-from") args[i] = named;
    }
  }
  std::vector<char*> pointers;
  for (auto& a : args) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  setenv(kHandedOver, "1", 1);
  execv(full.c_str(), pointers.data());
  if (errno == ENOENT) {  // swavg built or installed alone (cmake -DSWAVG_WITH_LIBTORCH=OFF)
    spdlog::error(
        "{}, and there is no swavg-torch beside it ({}): install swavg built with LibTorch "
        "(docs/install.md) to run this",
        why.what(), full);
    return static_cast<int>(exit_code::usage);
  }
  spdlog::error("{}, and {} could not be started: {}", why.what(), full, errno_text(errno));
  return static_cast<int>(exit_code::internal);
}

void settle_openmp(char** argv) {
  if (std::getenv("GOMP_SPINCOUNT") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  char self[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return;
  self[n] = '\0';
  setenv("GOMP_SPINCOUNT", kGompSpinCount, 1);
  execv(self, argv);
}

}  // namespace swavg
