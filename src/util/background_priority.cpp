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
constexpr int kIoprioClassIdle = 3;
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
  const long io = syscall(SYS_ioprio_set, kIoprioWhoProcess, 0, kIoprioClassIdle << kIoprioClassShift);
  done += io == 0 ? ", idle I/O class" : std::string(", idle I/O class refused: ") + std::strerror(errno);
  return done;
}

}  // namespace swavg
