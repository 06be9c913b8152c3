#include "util/paths.h"

#include <sys/stat.h>

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

std::string path_in_folder(const std::string& folder, const std::string& name) {
  if (folder.empty() || folder == ".") return name;
  return folder.back() == '/' ? folder + name : folder + "/" + name;
}

std::string without_trailing_slash(const std::string& path) {
  std::string p = path;
  for (;;) {
    while (p.size() > 1 && p.back() == '/') p.pop_back();
    if (p.size() > 2 && p.compare(p.size() - 2, 2, "/.") == 0)
      p.resize(p.size() - 1);
    else
      break;
  }
  const bool relative_part =
      p == "." || p == "/." || p == ".." || (p.size() > 3 && p.compare(p.size() - 3, 3, "/..") == 0);
  return relative_part ? real_path(p) : p;
}

std::string folder_resolved(const std::string& path) {
  char* dir = ::realpath(parent_dir(path).c_str(), nullptr);
  if (dir == nullptr) return path;
  std::string r = dir;
  std::free(dir);
  return path_in_folder(r, base_name(path));
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

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool is_folder(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace swavg
