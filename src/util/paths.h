/*
 * The file-system vocabulary, shared by every layer that names files: path text (the folder of, the
 * last part, a name in a folder, a folder without its trailing slash), resolution ("resolved",
 * "under") and what a path names (a regular file, a folder). One meaning each, so that a message,
 * an output check and an input reader agree on what "c0/" and "model.safetensors" are.
 */
#pragma once

#include <string>

namespace swavg {

// The folder part of `path` ("." for a bare name, "/" for a name at the root) and the last part.
std::string parent_dir(const std::string& path);
std::string base_name(const std::string& path);

// `name` in `folder`, one slash between: "c0" and "c0/" give "c0/x", "/" gives "/x"; "" and "." (the
// working folder, as parent_dir gives it for a bare name) give "x" itself.
std::string path_in_folder(const std::string& folder, const std::string& name);

// A folder's path without trailing slashes or "." parts ("out/" and "out/./." -> "out"; "/" stays).
// One whose last part is ".." (or that is "."), which names a folder by where it sits, is resolved:
// "ckpts/.." -> its real path, so that OUT.partial/ and the staging folder are its siblings.
std::string without_trailing_slash(const std::string& path);

// `path` with its folder resolved (symlinks, "..", relative to the working folder), the last part as
// written; `path` itself when the folder cannot be resolved.
std::string folder_resolved(const std::string& path);
// `path` with every symlink resolved; for a path that does not exist, folder_resolved(path).
std::string real_path(const std::string& path);

// True when `path` is `folder` or lies below it (compared as text: resolve both alike first).
bool is_under(const std::string& path, const std::string& folder);

// Whether `path` names a regular file, or a folder, following symbolic links (stat): a link to a
// checkpoint is read as the checkpoint. False when it does not exist or cannot be looked at.
bool is_regular_file(const std::string& path);
bool is_folder(const std::string& path);

}  // namespace swavg
