/*
 * Path text and resolution, shared by the output checks (atomic_file, the CLI's folder checks) and
 * the staged folders (atomic_dir): one meaning of "the folder of", "resolved" and "under".
 */
#pragma once

#include <string>

namespace swavg {

// The folder part of `path` ("." for a bare name, "/" for a name at the root) and the last part.
std::string parent_dir(const std::string& path);
std::string base_name(const std::string& path);

// `path` with its folder resolved (symlinks, "..", relative to the working folder), the last part as
// written; `path` itself when the folder cannot be resolved.
std::string folder_resolved(const std::string& path);
// `path` with every symlink resolved; for a path that does not exist, folder_resolved(path).
std::string real_path(const std::string& path);

// True when `path` is `folder` or lies below it (compared as text: resolve both alike first).
bool is_under(const std::string& path, const std::string& folder);

}  // namespace swavg
