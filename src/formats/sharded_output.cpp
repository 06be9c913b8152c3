#include "formats/sharded_output.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <numeric>
#include <nlohmann/json.hpp>
#include <set>

#include "formats/torch_file.h"
#include "util/atomic_dir.h"
#include "util/atomic_file.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/read_file.h"
#include "util/sha256.h"

namespace swavg {
namespace {

constexpr uint64_t kMaxShardSize = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
constexpr int kPlanVersion = 1;

struct size_unit {
  const char* suffix;  // upper case
  uint64_t factor;
  bool decimal;  // a lowercase final 'b' means bits, as in transformers
};

constexpr size_unit kUnits[] = {
    {"TIB", uint64_t(1) << 40, false}, {"GIB", uint64_t(1) << 30, false}, {"MIB", uint64_t(1) << 20, false},
    {"KIB", uint64_t(1) << 10, false}, {"TB", 1'000'000'000'000, true},   {"GB", 1'000'000'000, true},
    {"MB", 1'000'000, true},           {"KB", 1'000, true},
};

bool ends_with_upper(const std::string& s, const char* suffix) {
  const size_t n = std::char_traits<char>::length(suffix);
  if (s.size() < n) return false;
  for (size_t i = 0; i < n; ++i)
    if (std::toupper(static_cast<unsigned char>(s[s.size() - n + i])) != suffix[i]) return false;
  return true;
}

uint64_t tensor_bytes(const tensor_spec& t) {
  std::optional<uint64_t> n = itemsize(t.type);
  for (int64_t d : t.shape) n = n ? checked_mul(*n, static_cast<uint64_t>(d)) : std::nullopt;
  if (!n) throw input_error(fmt::format("tensor '{}': its size overflows", t.name));
  return *n;
}

file_format as_file_format(output_format f) {
  return f == output_format::safetensors ? file_format::safetensors : file_format::torch;
}

const char* const kWeightSuffixes[] = {".safetensors", ".bin",  ".pt",   ".pth",  ".ckpt",
                                       ".index.json",  ".h5",   ".msgpack", ".gguf", ".onnx"};

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

uint64_t parse_shard_size(const std::string& text, const std::string& option) {
  auto bad = [&](const std::string& why) {
    return usage_error(fmt::format("{} {}: {} (a size such as 5GB, 500MB, 2MiB or a number of bytes)", option,
                                   text.empty() ? "''" : text, why));
  };
  std::string number = text;
  uint64_t factor = 1;
  bool bits = false;
  for (const auto& u : kUnits)
    if (ends_with_upper(text, u.suffix)) {
      number = text.substr(0, text.size() - std::char_traits<char>::length(u.suffix));
      factor = u.factor;
      bits = u.decimal && text.back() == 'b';
      break;
    }
  const size_t dot = number.find('.');
  const std::string whole = number.substr(0, dot);
  const std::string fraction = dot == std::string::npos ? "" : number.substr(dot + 1);
  auto digits = [](const std::string& s) {
    return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (whole.empty() || !digits(whole) || !digits(fraction) || (dot != std::string::npos && fraction.empty()))
    throw bad("not a size");
  // value = (whole . fraction) * factor / (bits ? 8 : 1), exactly.
  std::optional<uint64_t> scaled = 0;
  uint64_t divisor = bits ? 8 : 1;
  for (char c : whole + fraction) {
    scaled = scaled ? checked_mul(*scaled, 10) : std::nullopt;
    scaled = scaled ? checked_add(*scaled, static_cast<uint64_t>(c - '0')) : std::nullopt;
  }
  for (size_t i = 0; i < fraction.size() && divisor != 0; ++i) {
    auto d = checked_mul(divisor, 10);
    divisor = d ? *d : 0;
  }
  if (divisor == 0) throw bad("too many digits");
  // Reduce factor / divisor before multiplying, so that 1.5GB does not overflow on the way.
  const uint64_t common = std::gcd(factor, divisor);
  const uint64_t f = factor / common, g = divisor / common;
  if (!scaled) throw bad("too large");
  if (*scaled % g != 0) throw bad("not a whole number of bytes");
  const std::optional<uint64_t> bytes = checked_mul(*scaled / g, f);
  if (!bytes || *bytes > kMaxShardSize) throw bad(fmt::format("too large (at most {} bytes)", kMaxShardSize));
  if (*bytes == 0) throw bad("must be at least 1 byte");
  return *bytes;
}

std::vector<std::vector<size_t>> pack_shards(const std::vector<uint64_t>& sizes, uint64_t limit) {
  std::vector<std::vector<size_t>> shards;
  uint64_t current = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const bool fits = sizes[i] <= limit && current <= limit - sizes[i];
    if (shards.empty() || (!fits && !shards.back().empty())) {
      shards.emplace_back();
      current = 0;
    }
    shards.back().push_back(i);
    current += sizes[i];
  }
  return shards;
}

shard_layout plan_layout(output_format format, std::vector<tensor_spec> specs, uint64_t max_shard_size,
                         weights_names names) {
  shard_layout layout;
  layout.names = names;
  layout.format = format;
  layout.max_shard_size = max_shard_size;
  layout.specs = std::move(specs);
  std::vector<uint64_t> sizes;
  sizes.reserve(layout.specs.size());
  for (const auto& t : layout.specs) {
    sizes.push_back(tensor_bytes(t));
    const auto total = checked_add(layout.total_size, sizes.back());
    if (!total) throw input_error("the output's size overflows");
    layout.total_size = *total;
  }
  const auto packed = pack_shards(sizes, max_shard_size);
  for (size_t k = 0; k < packed.size(); ++k) {
    output_shard s;
    s.file = packed.size() == 1 ? single_file_name(as_file_format(format), names)
                                : shard_file_name(as_file_format(format), k + 1, packed.size(), names);
    s.specs = packed[k];
    for (size_t i : s.specs) s.bytes += sizes[i];
    layout.shards.push_back(std::move(s));
  }
  return layout;
}

std::string output_index_name(output_format format, weights_names names) {
  return index_file_name(as_file_format(format), names);
}

std::string index_json(const shard_layout& layout) {
  nlohmann::json weight_map = nlohmann::json::object();
  for (const auto& s : layout.shards)
    for (size_t i : s.specs) weight_map[layout.specs[i].name] = s.file;
  nlohmann::json j = {{"metadata", {{"total_size", layout.total_size}}}, {"weight_map", weight_map}};
  return j.dump(2, ' ', /*ensure_ascii=*/true) + "\n";
}

std::string manifest_name(size_t index, size_t count) {
  return fmt::format("{}{}-of-{}.json", kManifestPrefix, index, count);
}

bool is_weight_file_name(const std::string& name) {
  for (const char* suffix : kWeightSuffixes) {
    const size_t n = std::char_traits<char>::length(suffix);
    if (name.size() >= n && name.compare(name.size() - n, n, suffix) == 0) return true;
  }
  return false;
}

folder_files classify_folder(const std::string& folder) {
  folder_files out;
  for (const auto& name : list_dir(folder)) {
    struct stat st {};
    const std::string path = folder + "/" + name;
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || is_weight_file_name(name) ||
        name.find(".swavg-") != std::string::npos)
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
  if (format != "torch" && format != "safetensors") throw input_error(fmt::format("{}: unknown format '{}'", path, format));
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
      throw mismatch_error(fmt::format("{}: written for another plan (plan_hash {}, the plan's is {})", path,
                                       m.plan_hash, plan_hash));
    if (m.index != i || m.count != plan.workers)
      throw mismatch_error(fmt::format("{}: says worker {} of {}, expected {} of {}", path, m.index, m.count, i,
                                       plan.workers));
    for (const auto& f : m.files) {
      if (!listed.emplace(f.name, f).second)
        throw mismatch_error(fmt::format("{}: '{}' is listed by workers {} and {}", partial, f.name, lister[f.name], i));
      lister[f.name] = i;
    }
  }
  if (!missing.empty())
    throw incomplete_error(fmt::format("{}/: worker{} {} of {} ha{} not finished (no manifest); nothing published",
                                       partial, missing.size() > 1 ? "s" : "", fmt::join(missing, ", "),
                                       plan.workers, missing.size() > 1 ? "ve" : "s"));
  std::vector<std::pair<std::string, size_t>> expected;  // file, owner
  for (size_t s = 0; s < plan.layout.shards.size(); ++s)
    expected.emplace_back(plan.layout.shards[s].file, s % plan.workers);
  for (const auto& c : plan.copied) expected.emplace_back(c, 0);
  std::vector<written_file> files;
  for (const auto& [name, owner] : expected) {
    const auto it = listed.find(name);
    if (it == listed.end() || lister[name] != owner)
      throw mismatch_error(fmt::format("{}/: '{}' is not in worker {}'s manifest, as the plan says", partial, name, owner));
    files.push_back(it->second);
    listed.erase(it);
  }
  if (!listed.empty())
    throw mismatch_error(fmt::format("{}/: manifests list '{}', which the plan does not have", partial,
                                     listed.begin()->first));
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
    if (!list_dir(out).empty() && !force)
      throw usage_error(fmt::format("{}: the output folder exists and is not empty; pass --force to replace it", out));
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
  if (r.plan.layout.indexed()) {
    const std::string text = index_json(r.plan.layout);
    atomic_file index(partial + "/" + output_index_name(r.plan.layout.format, r.plan.layout.names));
    index.hash_contents();
    index.write(text.data(), text.size());
    index.commit();
    r.files.push_back(
        written_file{output_index_name(r.plan.layout.format, r.plan.layout.names), index.tell(), index.digest()});
  }
  for (size_t i = 0; i < r.plan.workers; ++i) ::unlink((partial + "/" + manifest_name(i, r.plan.workers)).c_str());
  ::unlink(plan_path.c_str());
  publish_dir(partial, out, force);
  return r;
}

sharded_sink::sharded_sink(std::string folder, const shard_layout& layout,
                           const std::map<std::string, std::string>& metadata, size_t worker_index,
                           size_t worker_count, bool hashed)
    : folder_(std::move(folder)), layout_(layout), metadata_(metadata), hashed_(hashed) {
  for (size_t s = 0; s < layout_.shards.size(); ++s)
    if (worker_owns(s, worker_index, worker_count)) owned_.push_back(s);
  open_next();
  close_full();
}

sharded_sink::~sharded_sink() = default;

void sharded_sink::open_next() {
  if (next_ >= owned_.size()) return;
  open_shard_ = owned_[next_++];
  const output_shard& s = layout_.shards[open_shard_];
  std::vector<tensor_spec> specs;
  specs.reserve(s.specs.size());
  for (size_t i : s.specs) specs.push_back(layout_.specs[i]);
  sink_ = std::make_unique<tensor_sink>(folder_ + "/" + s.file, layout_.format, std::move(specs), metadata_,
                                        std::vector<object_entry>{}, hashed_);
  remaining_ = s.bytes;
}

// Commits every open shard whose bytes have all arrived (zero-byte shards at once).
void sharded_sink::close_full() {
  while (sink_ && remaining_ == 0) {
    sink_->commit();
    const std::string& file = layout_.shards[open_shard_].file;
    files_.push_back(written_file{file, sink_->bytes_written(), sink_->digest()});
    bytes_written_ += sink_->bytes_written();
    sink_.reset();
    open_next();
  }
}

void sharded_sink::write(const void* data, uint64_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    if (!sink_) throw error(exit_code::internal, "sharded_sink: more bytes than this worker's shards hold");
    const uint64_t n = std::min(size, remaining_);
    sink_->write(p, n);
    p += n;
    size -= n;
    remaining_ -= n;
    close_full();
  }
}

void sharded_sink::commit() {
  if (sink_) throw error(exit_code::internal, "sharded_sink: committed before all shards were written");
}

}  // namespace swavg
