#include "util/paths.h"

#include <cstdlib>

namespace swavg {

std::string parent_dir(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string folder_resolved(const std::string& path) {
  char* dir = ::realpath(parent_dir(path).c_str(), nullptr);
  if (dir == nullptr) return path;
  std::string r = dir;
  std::free(dir);
  return (r == "/" ? "" : r) + "/" + base_name(path);
}

std::string real_path(const std::string& path) {
  if (char* r = ::realpath(path.c_str(), nullptr)) {
    std::string out = r;
    std::free(r);
    return out;
  }
  return folder_resolved(path);
}

bool is_under(const std::string& path, const std::string& folder) {
  return path.compare(0, folder.size(), folder) == 0 && (path.size() == folder.size() || path[folder.size()] == '/');
}

}  // namespace swavg
