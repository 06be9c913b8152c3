/*
 * The folder output's protocol, start to end (output_folder.h), and the input folder's other files.
 */
#include "formats/io/output_folder.h"

#include <sys/stat.h>

#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "formats/dcp/dcp_output.h"
#include "formats/io/load.h"
#include "formats/io/worker_files.h"
#include "util/atomic_dir.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/paths.h"
#include "util/read_file.h"
#include "util/sha256.h"

namespace swavg {
namespace {

const char* const kWeightSuffixes[] = {".safetensors", ".bin",     ".pt",   ".pth",  ".ckpt",  ".index.json",
                                       ".h5",          ".msgpack", ".gguf", ".onnx", ".distcp"};

}  // namespace

bool is_weight_file_name(const std::string& name) {
  // A DCP folder's .metadata: copied into an output, it would make the folder read as DCP.
  if (name == kDcpMetadataName || is_index_file_name(name) || naming_of_weight_file(name)) return true;
  for (const char* suffix : kWeightSuffixes) {
    const size_t n = std::char_traits<char>::length(suffix);
    if (name.size() >= n && name.compare(name.size() - n, n, suffix) == 0) return true;
  }
  return false;
}

folder_files classify_folder(const std::string& folder) {
  folder_files out;
  for (const auto& name : list_dir(folder)) {
    const std::string path = path_in_folder(folder, name);
    const bool skip = !is_regular_file(path) || is_weight_file_name(name);
    if (!skip && is_job_file_name(name) && name.find(".swavg-tmp-") == std::string::npos)
      spdlog::warn("{}: not copied: named like a file of swavg's own (a plan, a manifest or finalize's record)", path);
    if (skip || is_job_file_name(name))
      out.skipped.push_back(name);
    else
      out.copied.push_back(name);
  }
  return out;
}

written_file copy_file_hashed(const std::string& from, const std::string& to, const std::string& name) {
  atomic_file out(to);
  out.hash_contents();
  read_chunks(from, 1 << 20, [&out](const char* data, size_t n) {
    out.write(data, n);
    return true;
  });
  out.commit();
  return written_file{name, out.tell(), out.digest()};
}

output_folder::output_folder(const std::string& out, size_t worker_index, size_t worker_count, bool force)
    : out_(without_trailing_slash(out)),
      partial_(partial_dir_of(out_)),
      worker_index_(worker_index),
      worker_count_(worker_count),
      force_(force) {}

output_folder::~output_folder() = default;

std::vector<std::string> output_folder::folders() const {
  std::vector<std::string> folders{out_};
  if (!plain()) folders.push_back(partial_);
  return folders;
}

void output_folder::refuse_missing_parent() const {
  const std::string parent = parent_dir(out_);
  if (!is_folder(parent)) throw io_error(fmt::format("{}/: output folder '{}' does not exist", out_, parent));
}

void output_folder::refuse_not_folder(const std::string& hint) const {
  if (!plain()) refuse_partial_link(partial_);
  struct stat st {};
  if (::stat(out_.c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    throw usage_error(fmt::format("{}/: exists and is not a folder{}", out_, hint));
}

void output_folder::refuse_inputs_inside(const std::vector<std::string>& inputs) const {
  const std::vector<std::string> written = folders();
  for (const auto& arg : inputs) {
    const bool folder_arg = is_folder(arg);
    if (folder_arg)
      for (const auto& folder : written)
        if (is_under(folder_resolved(folder), real_path(arg)))
          throw usage_error(
              fmt::format("{}/: inside the input folder '{}'; swavg never writes into what it reads, even with --force",
                          folder, arg));
    for (const auto& folder : written)
      if (is_under(real_path(arg), real_path(folder)) || is_under(folder_resolved(arg), real_path(folder)))
        throw usage_error(
            fmt::format("{}/: the output folder holds the input '{}'; swavg never overwrites or removes "
                        "its inputs, even with --force",
                        folder, arg));
  }
}

// A worker too: one run again after finalize published OUT/ would start a new job beside it.
void output_folder::refuse_non_empty() const {
  refuse_non_empty_folder(out_, out_ + "/", force_, plain() ? "" : " (and to swavg finalize)");
}

void output_folder::expect(step at, const char* what, bool writer) const {
  static const char* const kSteps[] = {"the refusals", "stage()", "open()", "finish()"};
  if (step_ != at || (writer && !writer_))
    throw error(exit_code::internal, fmt::format("{}/: output_folder::{} called after {}{}", out_, what,
                                                 kSteps[static_cast<int>(step_)], writer_ ? "" : ", with no format"));
}

void output_folder::use(std::unique_ptr<folder_writer> writer) {
  if (step_ == step::open || step_ == step::finished) expect(step::staged, "use()", false);
  writer_ = std::move(writer);
}

void output_folder::stage(std::string source, std::vector<std::string> copied, job_options options) {
  expect(step::refusing, "stage()", false);
  source_ = std::move(source);
  copied_ = std::move(copied);
  options_ = std::move(options);
  if (plain())
    stage_ = std::make_unique<staged_dir>(out_);
  else
    hold_partial();
  step_ = step::staged;
}

void output_folder::hold_partial() {
  if (!plain() && !lock_) lock_ = std::make_unique<partial_lock>(out_);
}

const std::string& output_folder::where() const { return plain() ? stage_->path() : partial_; }

shard_layout output_folder::plan_shards(std::vector<tensor_spec> specs,
                                        const std::map<std::string, std::string>& metadata) const {
  if (!writer_) expect(step_, "plan_shards()", true);
  return writer_->plan(std::move(specs), metadata);
}

planned_size output_folder::planned_file_size(const shard_layout& layout, size_t s,
                                              const std::map<std::string, std::string>& metadata) const {
  if (!writer_) expect(step_, "planned_file_size()", true);
  return writer_->planned_file_size(out_, layout, s, metadata);
}

void output_folder::record_plan(const std::string& plan) {
  if (plain()) {
    plan_hash_ = sha256_hex(plan.data(), plan.size());
  } else {
    ensure_dir(partial_);
    plan_hash_ = write_plan_once(partial_, plan);
  }
}

void output_folder::check_partial_plan(std::vector<tensor_spec> specs,
                                       const std::map<std::string, std::string>& metadata,
                                       const std::vector<std::string>& copied, const job_options& options) const {
  if (plain()) return;
  const shard_layout layout = plan_shards(std::move(specs), metadata);
  check_plan_there(partial_, plan_json(layout, metadata, copied, worker_count_, options));
}

output_sink& output_folder::open(std::vector<tensor_spec> specs, const std::map<std::string, std::string>& metadata) {
  expect(step::staged, "open()", true);
  layout_ = writer_->plan(std::move(specs), metadata);
  record_plan(plan_json(*layout_, metadata, copied_, worker_count_, options_));
  sink_ = writer_->open(where(), *layout_, metadata, worker_index_, worker_count_, !plain());
  step_ = step::open;
  return *sink_;
}

void output_folder::finish() {
  expect(step::open, "finish()", false);
  files_ = sink_->files();
  if (worker_index_ == 0)
    for (const auto& name : copied_)
      files_.push_back(copy_file_hashed(source_ + "/" + name, where() + "/" + name, name));
  step_ = step::finished;
  if (plain()) {
    if (layout_->indexed()) write_index(where(), *layout_);
    stage_->publish(force_);
    return;
  }
  const std::string text = manifest_json(worker_manifest{plan_hash_, worker_index_, worker_count_, files_});
  atomic_file manifest(partial_ + "/" + manifest_name(worker_index_, worker_count_));
  manifest.write(text.data(), text.size());
  manifest.commit();
}

}  // namespace swavg
