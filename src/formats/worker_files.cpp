/*
 * The workers' plan and manifests, and finalize (worker_files.h).
 */
#include "formats/worker_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <set>

#include "formats/hf_index.h"
#include "formats/output_folder.h"
#include "formats/torch_file.h"
#include "util/atomic_dir.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/read_file.h"
#include "util/sha256.h"

namespace swavg {
namespace {

constexpr int kPlanVersion = 1;

template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.is_object() || !j.contains(key)) throw input_error(fmt::format("{}: no \"{}\" field", path, key));
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw input_error(fmt::format("{}: field \"{}\" has the wrong type", path, key));
  }
}

nlohmann::json parse_json(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw input_error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
}

bool is_hex_digest(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(c) && !std::isupper(c); });
}

}  // namespace

std::string manifest_name(size_t index, size_t count) {
  return fmt::format("{}{}-of-{}.json", kManifestPrefix, index, count);
}

std::string plan_json(const shard_layout& layout, const std::map<std::string, std::string>& metadata,
                      const std::vector<std::string>& copied, size_t workers) {
  nlohmann::ordered_json j;
  j["swavg_plan"] = kPlanVersion;
  j["format"] = output_format_name(layout.format);
  j["max_shard_size"] = layout.max_shard_size;
  j["workers"] = workers;
  j["total_size"] = layout.total_size;
  if (layout.names != weights_names::transformers) j["weights_names"] = weights_names_name(layout.names);
  auto shards = nlohmann::ordered_json::array();
  for (const auto& s : layout.shards) {
    auto names = nlohmann::ordered_json::array();
    for (size_t i : s.specs) names.push_back(layout.specs[i].name);
    shards.push_back({{"file", s.file}, {"bytes", s.bytes}, {"tensors", names}});
  }
  j["shards"] = shards;
  j["copied"] = copied;
  j["metadata"] = metadata;
  return j.dump(1) + "\n";
}

job_plan parse_plan(const std::string& text, const std::string& path) {
  const nlohmann::json j = parse_json(text, path);
  if (field<int>(j, "swavg_plan", path) != kPlanVersion)
    throw input_error(fmt::format("{}: not a plan of this swavg (swavg_plan {})", path, j.at("swavg_plan").dump()));
  job_plan p;
  const std::string format = field<std::string>(j, "format", path);
  if (format != "torch" && format != "safetensors")
    throw input_error(fmt::format("{}: unknown format '{}'", path, format));
  p.layout.format = format == "torch" ? output_format::torch : output_format::safetensors;
  p.layout.max_shard_size = field<uint64_t>(j, "max_shard_size", path);
  p.workers = field<size_t>(j, "workers", path);
  p.layout.total_size = field<uint64_t>(j, "total_size", path);
  p.copied = field<std::vector<std::string>>(j, "copied", path);
  if (j.contains("weights_names")) {
    const std::string names = field<std::string>(j, "weights_names", path);
    const auto known = weights_names_from_name(names);
    if (!known) throw input_error(fmt::format("{}: unknown weights_names '{}'", path, names));
    p.layout.names = *known;
  }
  if (p.workers == 0) throw input_error(fmt::format("{}: 0 workers", path));
  if (!j.at("shards").is_array() || j.at("shards").empty()) throw input_error(fmt::format("{}: no shards", path));
  std::set<std::string> files;
  uint64_t total = 0;
  for (const auto& s : j.at("shards")) {
    output_shard shard;
    shard.file = field<std::string>(s, "file", path);
    shard.bytes = field<uint64_t>(s, "bytes", path);
    if (shard.file.empty() || shard.file.find('/') != std::string::npos || shard.file[0] == '.' ||
        !files.insert(shard.file).second)
      throw input_error(fmt::format("{}: bad shard file name '{}'", path, shard.file));
    for (const auto& name : field<std::vector<std::string>>(s, "tensors", path)) {
      shard.specs.push_back(p.layout.specs.size());
      p.layout.specs.push_back(tensor_spec{name, dtype::uint8, {}, std::nullopt});
    }
    const auto sum = checked_add(total, shard.bytes);
    if (!sum) throw input_error(fmt::format("{}: shard sizes overflow", path));
    total = *sum;
    p.layout.shards.push_back(std::move(shard));
  }
  if (total != p.layout.total_size)
    throw input_error(fmt::format("{}: total_size {} is not the shards' sum {}", path, p.layout.total_size, total));
  for (const auto& c : p.copied)
    if (c.empty() || c.find('/') != std::string::npos || c == "." || c == ".." || files.count(c))
      throw input_error(fmt::format("{}: bad copied file name '{}'", path, c));
  return p;
}

std::string manifest_json(const worker_manifest& m) {
  nlohmann::ordered_json j;
  j["plan_hash"] = m.plan_hash;
  j["index"] = m.index;
  j["count"] = m.count;
  auto files = nlohmann::ordered_json::array();
  for (const auto& f : m.files) files.push_back({{"name", f.name}, {"size", f.size}, {"sha256", f.sha256}});
  j["files"] = files;
  return j.dump(1) + "\n";
}

worker_manifest parse_manifest(const std::string& text, const std::string& path) {
  const nlohmann::json j = parse_json(text, path);
  worker_manifest m;
  m.plan_hash = field<std::string>(j, "plan_hash", path);
  m.index = field<size_t>(j, "index", path);
  m.count = field<size_t>(j, "count", path);
  if (!j.at("files").is_array()) throw input_error(fmt::format("{}: \"files\" is not a list", path));
  for (const auto& f : j.at("files")) {
    written_file w{field<std::string>(f, "name", path), field<uint64_t>(f, "size", path),
                   field<std::string>(f, "sha256", path)};
    if (!is_hex_digest(w.sha256)) throw input_error(fmt::format("{}: bad sha256 for '{}'", path, w.name));
    m.files.push_back(std::move(w));
  }
  return m;
}

std::string partial_dir_of(const std::string& out) { return without_trailing_slash(out) + kPartialSuffix; }

std::string write_plan_once(const std::string& partial, const std::string& plan_text) {
  const std::string path = partial + "/" + kPlanName;
  if (!create_file_once(path, plan_text) && read_text_file(path) != plan_text)
    throw mismatch_error(fmt::format(
        "{}/ holds another job's plan ({}): other inputs, options or worker count wrote into it; remove it or "
        "write elsewhere",
        partial, path));
  return sha256_hex(plan_text.data(), plan_text.size());
}

namespace {

// Checks the manifests against the plan; returns the files they list, in the plan's order.
std::vector<written_file> check_manifests(const std::string& partial, const job_plan& plan,
                                          const std::string& plan_hash) {
  std::vector<std::string> missing;
  std::map<std::string, written_file> listed;
  std::map<std::string, size_t> lister;
  for (size_t i = 0; i < plan.workers; ++i) {
    const std::string path = partial + "/" + manifest_name(i, plan.workers);
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      missing.push_back(std::to_string(i));
      continue;
    }
    const worker_manifest m = parse_manifest(read_text_file(path), path);
    if (m.plan_hash != plan_hash)
      throw mismatch_error(
          fmt::format("{}: written for another plan (plan_hash {}, the plan's is {})", path, m.plan_hash, plan_hash));
    if (m.index != i || m.count != plan.workers)
      throw mismatch_error(
          fmt::format("{}: says worker {} of {}, expected {} of {}", path, m.index, m.count, i, plan.workers));
    for (const auto& f : m.files) {
      if (!listed.emplace(f.name, f).second)
        throw mismatch_error(
            fmt::format("{}: '{}' is listed by workers {} and {}", partial, f.name, lister[f.name], i));
      lister[f.name] = i;
    }
  }
  if (!missing.empty())
    throw incomplete_error(fmt::format("{}/: worker{} {} of {} ha{} not finished (no manifest); nothing published",
                                       partial, missing.size() > 1 ? "s" : "", fmt::join(missing, ", "), plan.workers,
                                       missing.size() > 1 ? "ve" : "s"));
  std::vector<std::pair<std::string, size_t>> expected;  // file, owner
  for (size_t s = 0; s < plan.layout.shards.size(); ++s)
    expected.emplace_back(plan.layout.shards[s].file, s % plan.workers);
  for (const auto& c : plan.copied) expected.emplace_back(c, 0);
  std::vector<written_file> files;
  for (const auto& [name, owner] : expected) {
    const auto it = listed.find(name);
    if (it == listed.end() || lister[name] != owner)
      throw mismatch_error(
          fmt::format("{}/: '{}' is not in worker {}'s manifest, as the plan says", partial, name, owner));
    files.push_back(it->second);
    listed.erase(it);
  }
  if (!listed.empty())
    throw mismatch_error(
        fmt::format("{}/: manifests list '{}', which the plan does not have", partial, listed.begin()->first));
  return files;
}

void check_file(const std::string& partial, const written_file& f, bool verify) {
  const std::string path = partial + "/" + f.name;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    throw io_error(fmt::format("{}: missing (its worker's manifest lists it)", path));
  if (static_cast<uint64_t>(st.st_size) != f.size)
    throw io_error(fmt::format("{}: {} bytes, its manifest says {}", path, st.st_size, f.size));
  if (verify) {
    const std::string digest = sha256_file(path);
    if (digest != f.sha256)
      throw io_error(fmt::format("{}: sha256 {}, its manifest says {}: the file changed after its worker wrote it",
                                 path, digest, f.sha256));
  }
}

bool is_temp_name(const std::string& name) { return name.find(".swavg-tmp-") != std::string::npos; }

}  // namespace

finalize_result finalize_partial(const std::string& out_arg, bool verify, bool force) {
  const std::string out = without_trailing_slash(out_arg);
  const std::string partial = partial_dir_of(out);
  struct stat st {};
  if (::stat(partial.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw incomplete_error(fmt::format("{}/ does not exist: no worker has written its part of {}/ yet", partial, out));
  if (::lstat(out.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) throw usage_error(fmt::format("{}: exists and is not a folder", out));
    refuse_non_empty_folder(out, out, force);
  }
  const std::string plan_path = partial + "/" + kPlanName;
  if (::stat(plan_path.c_str(), &st) != 0)
    throw incomplete_error(fmt::format("{}: missing: no worker has planned the job yet", plan_path));
  const std::string plan_text = read_text_file(plan_path);
  finalize_result r;
  r.plan = parse_plan(plan_text, plan_path);
  r.plan_hash = sha256_hex(plan_text.data(), plan_text.size());
  r.files = check_manifests(partial, r.plan, r.plan_hash);

  std::set<std::string> known{kPlanName};
  for (size_t i = 0; i < r.plan.workers; ++i) known.insert(manifest_name(i, r.plan.workers));
  for (const auto& f : r.files) known.insert(f.name);
  std::vector<std::string> stale, unknown;
  for (const auto& name : list_dir(partial)) {
    if (known.count(name)) continue;
    if (!is_temp_name(name)) {
      unknown.push_back(name);
    } else if (!temp_is_stale(partial + "/" + name)) {
      throw incomplete_error(fmt::format("{}/{}: a worker is still writing it; nothing published", partial, name));
    } else {
      stale.push_back(name);
    }
  }
  if (!unknown.empty())
    throw mismatch_error(fmt::format("{}/ holds files no manifest lists: {}; remove them or rerun the job", partial,
                                     quoted_list(unknown)));
  for (const auto& f : r.files) check_file(partial, f, verify);

  for (const auto& name : stale) {
    ::unlink((partial + "/" + name).c_str());
    r.removed_temps.push_back(name);
  }
  if (r.plan.layout.indexed()) r.files.push_back(write_index(partial, r.plan.layout));
  for (size_t i = 0; i < r.plan.workers; ++i) ::unlink((partial + "/" + manifest_name(i, r.plan.workers)).c_str());
  ::unlink(plan_path.c_str());
  publish_dir(partial, out, force);
  return r;
}

}  // namespace swavg
