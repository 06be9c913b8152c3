/*
 * require_libtorch in the binary that links LibTorch (swavg-torch): every job can run here, so it
 * does nothing. Seam: declared in util/error.h; its stand-in in without_libtorch.cpp throws
 * needs_libtorch.
 */
#include <string>

#include "util/error.h"

namespace swavg {

// This binary loads LibTorch: every job can run here.
void require_libtorch(const std::string&) {}

}  // namespace swavg
