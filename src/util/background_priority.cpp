#include "util/background_priority.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace swavg {
namespace {

// linux/ioprio.h, which glibc does not wrap.
constexpr int kIoprioWhoProcess = 1;
constexpr int kIoprioClassBestEffort = 2;
constexpr int kIoprioLowest = 7;
constexpr int kIoprioClassShift = 13;
constexpr int kNice = 10;

}  // namespace

std::string lower_priority() {
  std::string done;
  errno = 0;
  const int now = getpriority(PRIO_PROCESS, 0);
  if (errno == 0 && now >= kNice)
    done = "nice " + std::to_string(now) + " kept";
  else if (setpriority(PRIO_PROCESS, 0, kNice) == 0)
    done = "nice 10";
  else
    done = std::string("nice 10 refused: ") + std::strerror(errno);
  const long io =
      syscall(SYS_ioprio_set, kIoprioWhoProcess, 0, (kIoprioClassBestEffort << kIoprioClassShift) | kIoprioLowest);
  done += io == 0 ? ", I/O priority best-effort 7" : std::string(", I/O priority refused: ") + std::strerror(errno);
  return done;
}

}  // namespace swavg
