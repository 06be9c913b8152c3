/*
 * The workers' plan, manifests and lock, and finalize with its record (worker_files.h).
 */
#include "formats/io/worker_files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "formats/torch/torch_file.h"
#include "util/atomic_dir.h"
#include "util/atomic_file.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/json_bytes.h"
#include "util/paths.h"
#include "util/printable.h"
#include "util/read_file.h"
#include "util/sha256.h"

namespace swavg {
namespace {

constexpr int kPlanVersion = 2;  // 2: the index as name and bytes
constexpr int kRecordVersion = 1;
constexpr uint64_t kMaxRecordBytes = 256 << 20;

std::string hex_of(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

std::optional<std::string> bytes_of_hex(const std::string& hex) {
  auto digit = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  if (hex.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    const int hi = digit(hex[i]), lo = digit(hex[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out += static_cast<char>(hi << 4 | lo);
  }
  return out;
}

template <typename T>
T field(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.is_object() || !j.contains(key)) throw input_error(fmt::format("{}: no \"{}\" field", path, key));
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw input_error(fmt::format("{}: field \"{}\" has the wrong type", path, key));
  }
}

const nlohmann::json& list_field(const nlohmann::json& j, const char* key, const std::string& path) {
  if (!j.is_object() || !j.contains(key)) throw input_error(fmt::format("{}: no \"{}\" field", path, key));
  if (!j.at(key).is_array()) throw input_error(fmt::format("{}: \"{}\" is not a list", path, key));
  return j.at(key);
}

nlohmann::json parse_json(const std::string& text, const std::string& path) {
  try {
    return json_parse<nlohmann::json>(text);
  } catch (const nlohmann::json::exception& e) {
    throw input_error(fmt::format("{}: not JSON: {}", path, e.what()));
  }
}

bool is_hex_digest(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) { return std::isxdigit(c) && !std::isupper(c); });
}

class fd_holder {
 public:
  fd_holder() = default;
  explicit fd_holder(int fd) : fd_(fd) {}
  ~fd_holder() {
    if (fd_ >= 0) ::close(fd_);
  }
  fd_holder(const fd_holder&) = delete;
  fd_holder(fd_holder&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  fd_holder& operator=(fd_holder&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// A job file's contents, std::nullopt when it does not exist. Never follows a symlink nor opens a
// FIFO or device for reading (input_error): it is opened non-blocking and checked a regular file.
std::optional<std::string> read_job_file(const std::string& path, uint64_t max_size) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::nullopt;
    throw io_error(fmt::format("{}: cannot stat: {}", path, errno_text(errno)));
  }
  if (!S_ISREG(st.st_mode))
    throw input_error(fmt::format("{}: not a regular file (a link, FIFO, device or folder); refused", path));
  fd_holder fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw io_error(fmt::format("{}: cannot open: {}", path, errno_text(errno)));
  }
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode))
    throw input_error(fmt::format("{}: not a regular file (a link, FIFO, device or folder); refused", path));
  if (static_cast<uint64_t>(st.st_size) > max_size)
    throw input_error(fmt::format("{}: {} bytes, more than the {} a job file may have", path, st.st_size, max_size));
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::read(fd.get(), &text[got], text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw io_error(fmt::format("{}: cannot read: {}", path, errno_text(errno)));
    if (n == 0) throw io_error(fmt::format("{}: changed while being read", path));
    got += static_cast<size_t>(n);
  }
  return text;
}

bool same_file(int fd, const std::string& path) {
  struct stat a {
  }, b{};
  return ::fstat(fd, &a) == 0 && ::lstat(path.c_str(), &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Opens and flocks `path` (a folder or a regular file) without waiting. An fd of -1 when it does not
// exist; incomplete_error `busy` when another process holds a conflicting lock.
fd_holder lock_path(const std::string& path, int op, bool folder, const std::string& busy) {
  fd_holder fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | (folder ? O_DIRECTORY : 0)));
  if (fd.get() < 0) {
    if (errno == ENOENT) return fd_holder();
    throw io_error(fmt::format("{}: cannot open: {}", path, errno_text(errno)));
  }
  while (::flock(fd.get(), op | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) throw incomplete_error(busy);
    throw io_error(fmt::format("{}: cannot lock: {}", path, errno_text(errno)));
  }
  return fd;
}

void step(const char* name) {
  const char* at = std::getenv("SWAVG_FINALIZE_KILL_AT");
  if (at != nullptr && std::strcmp(at, name) == 0) ::raise(SIGKILL);
}

void fsync_fd(int fd, const std::string& path) {
  if (::fsync(fd) != 0) throw io_error(fmt::format("{}: fsync failed: {}", path, errno_text(errno)));
}

void fsync_folder(const std::string& path) {
  fd_holder fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) throw io_error(fmt::format("{}: cannot open: {}", path, errno_text(errno)));
  fsync_fd(fd.get(), path);
}

void unlink_if_there(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    throw io_error(fmt::format("{}: cannot remove: {}", path, errno_text(errno)));
}

}  // namespace

namespace {

// The index file the plan records, as a manifest lists a file.
written_file index_file(const shard_layout& layout) {
  return written_file{layout.index_name, layout.index_bytes.size(),
                      sha256_hex(layout.index_bytes.data(), layout.index_bytes.size())};
}

}  // namespace

written_file write_index(const std::string& folder, const shard_layout& layout) {
  atomic_file index(folder + "/" + layout.index_name);
  index.write(layout.index_bytes.data(), layout.index_bytes.size());
  index.commit();
  return index_file(layout);
}

std::string manifest_name(size_t index, size_t count) {
  return fmt::format("{}{}-of-{}.json", kManifestPrefix, index, count);
}

std::string plan_json(const shard_layout& layout, const std::map<std::string, std::string>& metadata,
                      const std::vector<std::string>& copied, size_t workers, const job_options& options) {
  nlohmann::ordered_json j;
  j["swavg_plan"] = kPlanVersion;
  j["format"] = output_format_name(layout.format);
  j["max_shard_size"] = layout.max_shard_size;
  j["workers"] = workers;
  j["total_size"] = layout.total_size;
  auto opts = nlohmann::ordered_json::object();
  for (const auto& [name, value] : options) opts[name] = value;
  j["options"] = opts;
  auto shards = nlohmann::ordered_json::array();
  for (const auto& s : layout.shards) {
    auto names = nlohmann::ordered_json::array();
    for (size_t i : s.specs) names.push_back(layout.specs[i].name);
    shards.push_back({{"file", s.file}, {"bytes", s.bytes}, {"tensors", names}});
  }
  j["shards"] = shards;
  j["copied"] = copied;
  j["metadata"] = metadata;
  if (layout.indexed()) j["index"] = {{"name", layout.index_name}, {"bytes", hex_of(layout.index_bytes)}};
  return json_dump(j, 1) + "\n";
}

job_plan parse_plan(const std::string& text, const std::string& path) {
  const nlohmann::json j = parse_json(text, path);
  if (field<int>(j, "swavg_plan", path) != kPlanVersion)
    throw input_error(fmt::format("{}: not a plan of this swavg (swavg_plan {})", path, j.at("swavg_plan").dump()));
  job_plan p;
  const std::string format = field<std::string>(j, "format", path);
  const auto known_format = output_format_from_name(format);
  if (!known_format) throw input_error(fmt::format("{}: unknown format '{}'", path, format));
  p.layout.format = *known_format;
  if (j.contains("index")) {
    const nlohmann::json& index = j.at("index");
    p.layout.index_name = field<std::string>(index, "name", path);
    const std::string& name = p.layout.index_name;
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == ".." || is_job_file_name(name))
      throw input_error(fmt::format("{}: bad index file name '{}'", path, printable(name)));
    const auto bytes = bytes_of_hex(field<std::string>(index, "bytes", path));
    if (!bytes) throw input_error(fmt::format("{}: the index's \"bytes\" are not hex", path));
    p.layout.index_bytes = *bytes;
  }
  p.layout.max_shard_size = field<uint64_t>(j, "max_shard_size", path);
  const uint64_t workers = field<uint64_t>(j, "workers", path);
  if (workers == 0 || workers > static_cast<uint64_t>(kMaxWorkers))
    throw input_error(fmt::format("{}: {} workers (expected 1 to {})", path, workers, kMaxWorkers));
  p.workers = static_cast<size_t>(workers);
  p.layout.total_size = field<uint64_t>(j, "total_size", path);
  p.copied = field<std::vector<std::string>>(j, "copied", path);
  if (j.contains("options")) field<std::map<std::string, std::string>>(j, "options", path);
  const nlohmann::json& shards = list_field(j, "shards", path);
  if (shards.empty()) throw input_error(fmt::format("{}: no shards", path));
  if (shards.size() > kMaxShards)
    throw input_error(fmt::format("{}: {} shards (at most {})", path, shards.size(), kMaxShards));
  std::set<std::string> files;
  uint64_t total = 0;
  for (const auto& s : shards) {
    output_shard shard;
    shard.file = field<std::string>(s, "file", path);
    shard.bytes = field<uint64_t>(s, "bytes", path);
    if (shard.file.empty() || shard.file.find('/') != std::string::npos || shard.file[0] == '.' ||
        is_job_file_name(shard.file) || !files.insert(shard.file).second)
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
  const std::string& index = p.layout.index_name;
  for (const auto& c : p.copied)
    if (c.empty() || c.find('/') != std::string::npos || c == "." || c == ".." || files.count(c) || c == index ||
        is_job_file_name(c) || !files.insert(c).second)
      throw input_error(fmt::format("{}: bad copied file name '{}'", path, c));
  if (!index.empty() && files.count(index)) throw input_error(fmt::format("{}: bad shard file name '{}'", path, index));
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
  return json_dump(j, 1) + "\n";
}

worker_manifest parse_manifest(const std::string& text, const std::string& path) {
  const nlohmann::json j = parse_json(text, path);
  worker_manifest m;
  m.plan_hash = field<std::string>(j, "plan_hash", path);
  const uint64_t index = field<uint64_t>(j, "index", path), count = field<uint64_t>(j, "count", path);
  if (count == 0 || count > static_cast<uint64_t>(kMaxWorkers) || index >= count)
    throw input_error(
        fmt::format("{}: worker {} of {} (expected 0 <= index < count <= {})", path, index, count, kMaxWorkers));
  m.index = static_cast<size_t>(index);
  m.count = static_cast<size_t>(count);
  for (const auto& f : list_field(j, "files", path)) {
    written_file w{field<std::string>(f, "name", path), field<uint64_t>(f, "size", path),
                   field<std::string>(f, "sha256", path)};
    if (!is_hex_digest(w.sha256)) throw input_error(fmt::format("{}: bad sha256 for '{}'", path, w.name));
    m.files.push_back(std::move(w));
  }
  return m;
}

std::string partial_dir_of(const std::string& out) { return without_trailing_slash(out) + kPartialSuffix; }

void refuse_partial_link(const std::string& partial) {
  struct stat st {};
  if (::lstat(partial.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return;
  std::string target(4096, '\0');
  const ssize_t n = ::readlink(partial.c_str(), target.data(), target.size());
  target.resize(n > 0 ? static_cast<size_t>(n) : 0);
  throw usage_error(fmt::format(
      "{}/: a symbolic link (to '{}'), not a folder: the workers of a job make {}/ themselves and swavg never "
      "writes through a link; remove the link (rm {}) and run the workers again, or give -o the folder where the "
      "output should be",
      partial, target, partial, partial));
}

namespace {

// What differs between two plans, the first option first.
std::string plan_difference(const std::string& ours_text, const std::string& theirs_text) {
  nlohmann::ordered_json ours, theirs;
  try {
    ours = json_parse(ours_text);
    theirs = json_parse(theirs_text);
  } catch (const nlohmann::json::exception&) {
    return "it is not a plan of this swavg";
  }
  if (!theirs.is_object()) return "it is not a plan of this swavg";
  const auto opts = ours.value("options", nlohmann::ordered_json::object());
  const auto theirs_opts = theirs.contains("options") && theirs["options"].is_object()
                               ? theirs["options"]
                               : nlohmann::ordered_json::object();
  auto shown = [](const nlohmann::ordered_json& o, const std::string& k) {
    if (!o.contains(k)) return std::string("(not set)");
    return o[k].is_string() ? "'" + o[k].get<std::string>() + "'" : json_dump(o[k]);
  };
  for (auto it = opts.begin(); it != opts.end(); ++it)
    if (!theirs_opts.contains(it.key()) || theirs_opts[it.key()] != it.value())
      return fmt::format("{} differs: {} here, {} in the plan there", it.key(), shown(opts, it.key()),
                         shown(theirs_opts, it.key()));
  for (auto it = theirs_opts.begin(); it != theirs_opts.end(); ++it)
    if (!opts.contains(it.key()))
      return fmt::format("{} differs: {} here, {} in the plan there", it.key(), shown(opts, it.key()),
                         shown(theirs_opts, it.key()));
  for (const char* key : {"workers", "format", "max_shard_size"})
    if (ours.value(key, nlohmann::ordered_json()) != theirs.value(key, nlohmann::ordered_json()))
      return fmt::format("\"{}\" differs: {} here, {} in the plan there", key,
                         json_dump(ours.value(key, nlohmann::ordered_json())),
                         json_dump(theirs.value(key, nlohmann::ordered_json())));
  return "the inputs differ (their tensors, shapes, dtypes or metadata, or the files copied)";
}

}  // namespace

void check_plan_there(const std::string& partial, const std::string& plan_text) {
  const std::string path = partial + "/" + kPlanName;
  const auto there = read_job_file(path, kMaxJobFileBytes);
  if (there && *there != plan_text)
    throw mismatch_error(
        fmt::format("{}: another job's plan: {}; every worker of a job takes the same inputs, options and worker "
                    "count; remove {}/ or write elsewhere",
                    path, plan_difference(plan_text, *there), partial));
}

std::string write_plan_once(const std::string& partial, const std::string& plan_text) {
  if (!create_file_once(partial + "/" + kPlanName, plan_text)) check_plan_there(partial, plan_text);
  return sha256_hex(plan_text.data(), plan_text.size());
}

void refuse_interrupted_finalize(const std::string& out) {
  struct stat st {};
  const std::string record = out + kFinalizeRecordSuffix;
  if (::lstat(record.c_str(), &st) == 0)
    throw incomplete_error(fmt::format(
        "{}: a swavg finalize of {}/ was interrupted: run `swavg finalize {}/` again to finish it; this worker wrote "
        "nothing",
        record, out, out));
}

partial_lock::partial_lock(const std::string& out_arg) {
  const std::string out = without_trailing_slash(out_arg);
  const std::string partial = partial_dir_of(out);
  refuse_partial_link(partial);
  const std::string busy = fmt::format(
      "{}/: a swavg finalize is publishing it; this worker wrote nothing (run it again only if the finalize fails)",
      partial);
  for (int attempt = 0; attempt < 3 && fd_ < 0; ++attempt) {
    ensure_dir(partial);
    fd_holder fd = lock_path(partial, LOCK_SH, true, busy);
    if (fd.get() >= 0 && same_file(fd.get(), partial)) fd_ = fd.release();
  }
  if (fd_ < 0) throw incomplete_error(fmt::format("{}/: replaced while this worker was locking it", partial));
  refuse_interrupted_finalize(out);
}

partial_lock::~partial_lock() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// The texts finalize checks: the plan and each worker's manifest (std::nullopt: not written yet).
struct job_texts {
  std::string plan;
  std::string plan_source;
  std::vector<std::optional<std::string>> manifests;
  std::vector<std::string> manifest_sources;
};

// Checks the manifests against the plan; returns the files they list, in the plan's order.
std::vector<written_file> check_manifests(const std::string& partial, const job_plan& plan,
                                          const std::string& plan_hash, const job_texts& texts) {
  std::vector<std::string> missing;
  std::map<std::string, written_file> listed;
  std::map<std::string, size_t> lister;
  for (size_t i = 0; i < plan.workers; ++i) {
    const std::string& path = texts.manifest_sources[i];
    if (!texts.manifests[i]) {
      missing.push_back(std::to_string(i));
      continue;
    }
    const worker_manifest m = parse_manifest(*texts.manifests[i], path);
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
  if (!missing.empty()) {
    const size_t shown = std::min<size_t>(missing.size(), 20);
    const std::string more = missing.size() > shown ? fmt::format(" and {} more", missing.size() - shown) : "";
    missing.resize(shown);
    throw incomplete_error(fmt::format("{}/: worker{} {}{} of {} ha{} not finished (no manifest); nothing published",
                                       partial, shown > 1 ? "s" : "", fmt::join(missing, ", "), more, plan.workers,
                                       shown > 1 ? "ve" : "s"));
  }
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

// Empty when `folder`/`f` is a regular file of the manifest's size (and digest, with `verify`), else
// what is wrong with it.
std::string file_problem(const std::string& folder, const written_file& f, bool verify) {
  const std::string path = folder + "/" + f.name;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode))
    return fmt::format("{}: missing or not a regular file (its worker's manifest lists it)", path);
  if (static_cast<uint64_t>(st.st_size) != f.size)
    return fmt::format("{}: {} bytes, its manifest says {}", path, st.st_size, f.size);
  if (verify) {
    const std::string digest = sha256_file(path);
    if (digest != f.sha256)
      return fmt::format("{}: sha256 {}, its manifest says {}: the file changed after its worker wrote it", path,
                         digest, f.sha256);
  }
  return "";
}

bool is_temp_name(const std::string& name) { return name.find(".swavg-tmp-") != std::string::npos; }

std::string record_json(const job_texts& t) {
  nlohmann::ordered_json j;
  j["swavg_finalize"] = kRecordVersion;
  j["plan"] = t.plan;
  auto manifests = nlohmann::ordered_json::array();
  for (const auto& m : t.manifests) manifests.push_back(*m);
  j["manifests"] = manifests;
  return j.dump() + "\n";
}

job_texts parse_record(const std::string& text, const std::string& path) {
  const nlohmann::json j = parse_json(text, path);
  if (field<int>(j, "swavg_finalize", path) != kRecordVersion)
    throw input_error(fmt::format("{}: not a finalize record of this swavg", path));
  job_texts t;
  t.plan = field<std::string>(j, "plan", path);
  t.plan_source = path + ": plan";
  const nlohmann::json& manifests = list_field(j, "manifests", path);
  if (manifests.size() > static_cast<size_t>(kMaxWorkers))
    throw input_error(fmt::format("{}: {} manifests (at most {})", path, manifests.size(), kMaxWorkers));
  for (const auto& m : manifests) {
    if (!m.is_string()) throw input_error(fmt::format("{}: a manifest that is not a string", path));
    t.manifest_sources.push_back(fmt::format("{}: manifest {}", path, t.manifests.size()));
    t.manifests.push_back(m.get<std::string>());
  }
  return t;
}

// True when `out` holds exactly the files of the job, as listed, and its index.
bool published_as(const std::string& out, const std::vector<written_file>& files, const std::string& index_name,
                  const std::string& index_text, bool verify) {
  struct stat st {};
  if (::lstat(out.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  std::vector<std::string> expected;
  for (const auto& f : files) expected.push_back(f.name);
  if (!index_name.empty()) expected.push_back(index_name);
  std::sort(expected.begin(), expected.end());
  if (list_dir(out) != expected) return false;
  for (const auto& f : files)
    if (!file_problem(out, f, verify).empty()) return false;
  if (index_name.empty()) return true;
  const auto there = read_job_file(out + "/" + index_name, kMaxJobFileBytes);
  return there && *there == index_text;
}

// OUT/ is a folder (not a link to one) holding at least one file and none of the job's own files.
bool holds_published_folder(const std::string& out) {
  struct stat st {};
  if (::lstat(out.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return false;
  const std::vector<std::string> names = list_dir(out);
  if (names.empty()) return false;
  return std::none_of(names.begin(), names.end(), [](const std::string& n) { return is_job_file_name(n); });
}

// finalize, read top to bottom as run() calls it: lock, read the job's files, check them against the
// plan, finish from a killed finalize's record, or check OUT.partial/ and publish it.
class finalizer {
 public:
  finalizer(const std::string& out, bool verify, bool force)
      : out_(without_trailing_slash(out)),
        partial_(partial_dir_of(out_)),
        record_path_(out_ + kFinalizeRecordSuffix),
        verify_(verify),
        force_(force) {}

  finalize_result run() {
    if (!lock()) {
      finalize_result done;
      done.already_published = true;
      return done;
    }
    read_job_files();
    r_.files = check_manifests(partial_, r_.plan, r_.plan_hash, texts_);
    if (record_ && finish_from_record()) return std::move(r_);
    refuse_output();
    check_partial();
    publish();
    return std::move(r_);
  }

 private:
  // Locks OUT.partial/ (or, with only a record left, the record); false when there is nothing left
  // to finalize and OUT/ is published.
  bool lock() {
    const std::string busy = fmt::format(
        "{}/: another swavg holds it (a worker writing its part, or another finalize); nothing published; run "
        "finalize again once it is done",
        partial_);
    struct stat st {};
    if (::lstat(partial_.c_str(), &st) == 0) {
      refuse_partial_link(partial_);
      if (!S_ISDIR(st.st_mode)) throw usage_error(fmt::format("{}: exists and is not a folder", partial_));
      lock_ = lock_path(partial_, LOCK_EX, true, busy);
      if (lock_.get() >= 0 && !same_file(lock_.get(), partial_))
        throw incomplete_error(
            fmt::format("{}/: published or replaced by another swavg while this finalize locked it", partial_));
    }
    have_partial_ = lock_.get() >= 0;
    record_ = read_job_file(record_path_, kMaxRecordBytes);
    if (!have_partial_) {
      if (!record_) {
        if (holds_published_folder(out_)) return false;
        throw incomplete_error(
            fmt::format("{}/ does not exist: no worker has written its part of {}/ yet", partial_, out_));
      }
      lock_ = lock_path(record_path_, LOCK_EX, false, busy);
    }
    step("locked");
    return true;
  }

  // The plan and the manifests: from the record, or from OUT.partial/.
  void read_job_files() {
    if (record_) {
      texts_ = parse_record(*record_, record_path_);
    } else {
      texts_.plan_source = partial_ + "/" + kPlanName;
      const auto plan = read_job_file(texts_.plan_source, kMaxJobFileBytes);
      if (!plan)
        throw incomplete_error(fmt::format("{}: missing: no worker has planned the job yet", texts_.plan_source));
      texts_.plan = *plan;
    }
    r_.plan = parse_plan(texts_.plan, texts_.plan_source);
    r_.plan_hash = sha256_hex(texts_.plan.data(), texts_.plan.size());
    if (record_) {
      if (texts_.manifests.size() != r_.plan.workers)
        throw input_error(fmt::format("{}: {} manifests for a plan of {} workers", record_path_,
                                      texts_.manifests.size(), r_.plan.workers));
      return;
    }
    for (size_t i = 0; i < r_.plan.workers; ++i) {
      texts_.manifest_sources.push_back(partial_ + "/" + manifest_name(i, r_.plan.workers));
      texts_.manifests.push_back(read_job_file(texts_.manifest_sources.back(), kMaxJobFileBytes));
    }
  }

  // A killed finalize's record: true when OUT/ is what it published (the leftovers are removed).
  bool finish_from_record() {
    const shard_layout& layout = r_.plan.layout;
    if (have_partial_) {
      const auto plan_there = read_job_file(partial_ + "/" + kPlanName, kMaxJobFileBytes);
      if (plan_there && *plan_there != texts_.plan)
        throw mismatch_error(fmt::format("{}: records a finalize of another plan than {}/{}; remove one of them",
                                         record_path_, partial_, kPlanName));
    }
    if (published_as(out_, r_.files, layout.index_name, layout.index_bytes, verify_)) {
      // Killed after the rename: with --force the folder replaced may be left as OUT.partial/.
      if (have_partial_) remove_tree(partial_);
      unlink_if_there(record_path_);
      fsync_folder(parent_dir(out_));
      if (layout.indexed()) r_.files.push_back(index_file(layout));
      return true;
    }
    if (!have_partial_)
      throw io_error(fmt::format("{}: records a finalize of {}/, but {}/ is gone and {}/ is not what it published",
                                 record_path_, out_, partial_, out_));
    return false;
  }

  void refuse_output() const {
    struct stat st {};
    if (::lstat(out_.c_str(), &st) != 0) return;
    if (!S_ISDIR(st.st_mode)) throw usage_error(fmt::format("{}: exists and is not a folder", out_));
    refuse_non_empty_folder(out_, out_, force_);
  }

  // OUT.partial/ holds the job's files, each of its planned size (and digest), and stale temps only.
  void check_partial() {
    std::set<std::string> known{kPlanName};
    for (size_t i = 0; i < r_.plan.workers; ++i) known.insert(manifest_name(i, r_.plan.workers));
    for (const auto& f : r_.files) known.insert(f.name);
    if (r_.plan.layout.indexed()) known.insert(r_.plan.layout.index_name);
    std::vector<std::string> unknown;
    for (const auto& name : list_dir(partial_)) {
      if (known.count(name)) continue;
      if (!is_temp_name(name)) {
        unknown.push_back(name);
      } else if (!temp_is_stale(partial_ + "/" + name)) {
        throw incomplete_error(fmt::format("{}/{}: a worker is still writing it; nothing published", partial_, name));
      } else {
        stale_.push_back(name);
      }
    }
    if (!unknown.empty())
      throw mismatch_error(fmt::format("{}/ holds files no manifest lists: {}; remove them or rerun the job", partial_,
                                       quoted_list(unknown)));
    for (const auto& f : r_.files)
      if (const std::string problem = file_problem(partial_, f, verify_); !problem.empty()) throw io_error(problem);
    step("checked");
  }

  // The index, the record, the job's files removed, OUT.partial/ renamed to OUT/, the record removed.
  void publish() {
    for (const auto& name : stale_) {
      ::unlink((partial_ + "/" + name).c_str());
      r_.removed_temps.push_back(name);
    }
    step("temps");
    if (r_.plan.layout.indexed()) r_.files.push_back(write_index(partial_, r_.plan.layout));
    step("index");
    if (!record_) {
      const std::string record = record_json(texts_);
      atomic_file file(record_path_);
      file.write(record.data(), record.size());
      file.commit();
    }
    step("record");
    for (size_t i = 0; i < r_.plan.workers; ++i) {
      unlink_if_there(partial_ + "/" + manifest_name(i, r_.plan.workers));
      if (i == 0) step("manifest");
    }
    step("manifests");
    unlink_if_there(partial_ + "/" + kPlanName);
    step("plan");
    fsync_fd(lock_.get(), partial_);
    publish_dir(partial_, out_, force_);
    step("renamed");
    unlink_if_there(record_path_);
    fsync_folder(parent_dir(out_));
  }

  const std::string out_, partial_, record_path_;
  const bool verify_, force_;
  fd_holder lock_;
  bool have_partial_ = false;
  std::optional<std::string> record_;
  job_texts texts_;
  std::vector<std::string> stale_;
  finalize_result r_;
};

}  // namespace

finalize_result finalize_partial(const std::string& out, bool verify, bool force) {
  return finalizer(out, verify, force).run();
}

}  // namespace swavg
