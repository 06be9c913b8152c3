#include "cli/read_set.h"

#include <fmt/format.h>

#include "formats/io/load.h"
#include "formats/io/output_folder.h"
#include "util/atomic_dir.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/paths.h"

namespace swavg {

void read_set::add_checkpoint(const std::string& path) {
  if (path.empty()) return;
  for (auto& f : checkpoint_files(path)) files_.push_back(std::move(f));
  files_.push_back(path);
}

void read_set::add_file(const std::string& path) {
  if (!path.empty()) files_.push_back(path);
}

void read_set::add_resumed(const std::string& path) {
  if (path.empty()) return;
  resumed_ = path;
  resumed_files_ = checkpoint_files(path);
  resumed_files_.push_back(path);
}

std::vector<std::string> read_set::files() const {
  std::vector<std::string> all = files_;
  all.insert(all.end(), resumed_files_.begin(), resumed_files_.end());
  return all;
}

// The files `output` may not be: all of them, less the resumed ones when it is the resumed
// checkpoint itself (the rolling average replaces what it resumed).
std::vector<std::string> read_set::read_for(const std::string& output, bool folder_output) const {
  if (resumed_.empty()) return files_;
  const bool rolling = folder_output
                           ? real_path(without_trailing_slash(resumed_)) == real_path(without_trailing_slash(output))
                           : resumed_files_.size() == 2 && same_file(resumed_files_.front(), output);
  return rolling ? files_ : files();
}

// Two outputs that are one file are named, the later option first ("--report and -o"), and so is
// an output (but -o) that is the --resume file.
void read_set::check_distinct(const std::vector<output_path>& outputs, bool first_is_output) const {
  std::vector<std::pair<std::string, std::string>> named;
  for (auto o = outputs.rbegin(); o != outputs.rend(); ++o) named.emplace_back(o->option, o->path);
  check_distinct_paths(named);
  for (size_t i = first_is_output ? 1 : 0; i < outputs.size(); ++i)
    check_distinct_paths({{outputs[i].option, outputs[i].path}, {"--resume", resumed_}});
}

void read_set::check_file_outputs(const std::vector<output_path>& outputs) const {
  check_distinct(outputs, true);
  for (size_t i = 0; i < outputs.size(); ++i)
    if (!outputs[i].path.empty())
      check_output_path(outputs[i].path, i == 0 ? read_for(outputs[i].path, false) : files(), outputs[i].force);
}

void read_set::check_folder_output(const output_folder& out, const std::vector<output_path>& reports) const {
  out.refuse_inputs_inside(read_for(out.path(), true));
  for (const auto& r : reports)
    for (const auto& folder : out.folders())
      if (!r.path.empty() && is_under(real_path(r.path), real_path(folder)))
        throw usage_error(
            fmt::format("{} {}: inside the output folder {}/, which is written as a whole", r.option, r.path, folder));
  check_distinct(reports, false);
  for (const auto& r : reports)
    if (!r.path.empty()) check_output_path(r.path, files(), r.force);
}

}  // namespace swavg
