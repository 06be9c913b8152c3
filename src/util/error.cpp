#include "util/error.h"

#include <cstring>

namespace swavg {

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace swavg
