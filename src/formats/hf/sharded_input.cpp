#include "formats/hf/sharded_input.h"

#include <dirent.h>
#include <sys/stat.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <cmath>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "formats/core/json_dom.h"
#include "util/checked.h"
#include "util/error.h"
#include "util/listing.h"
#include "util/mapped_file.h"
#include "util/paths.h"
#include "util/printable.h"
#include "util/read_file.h"

namespace swavg {
namespace {

using json = nlohmann::json;

constexpr int kMaxJsonDepth = 128;
constexpr size_t kMaxListedProblems = 20;
constexpr uint64_t kMaxConfigBytes = uint64_t{16} << 20;  // a config.json read for "transformers_weights"

std::string in_quotes(const std::string& s) { return fmt::format("'{}'", printable(s)); }

std::string type_with_article(const json& j) {
  const std::string t = j.type_name();
  return (t == "object" || t == "array" ? "an " : "a ") + t;
}

// Problems found in one step, reported together in one message.
class problems {
 public:
  void add(std::string p) { list_.push_back(std::move(p)); }
  void throw_if_any(const std::string& head) const {
    if (list_.empty()) return;
    if (list_.size() == 1) throw input_error(fmt::format("{}: {}", head, list_.front()));
    throw input_error(fmt::format("{}: {} problems:{}", head, list_.size(), listed_lines(list_, kMaxListedProblems)));
  }

 private:
  std::vector<std::string> list_;
};

// Builds the index's DOM through nlohmann's SAX interface, except for the entries of the top-level
// "weight_map", which are kept in the file's order (nlohmann's objects are sorted) with duplicates
// and non-string shard names noted as problems. A duplicate key elsewhere is refused.
class index_parser : public json_dom_parser {
 public:
  index_parser(std::string path, problems& found)
      : json_dom_parser(std::move(path), kMaxJsonDepth, fmt::format("JSON nests deeper than {} levels", kMaxJsonDepth),
                        "not valid JSON: "),
        found_(found) {}

  std::vector<std::pair<std::string, std::string>>& entries() { return entries_; }
  bool saw_map() const { return map_seen_; }

  bool string(string_t& v) override {
    if (in_map_value()) {
      entries_.emplace_back(std::move(dom_.key), std::move(v));
      return true;
    }
    return add(std::move(v));
  }

  bool start_object(std::size_t n) override {
    if (depth() == 1 && dom_.key == "weight_map") {  // the top level's, not a tensor of that name in it
      map_seen_ = true;
      map_depth_ = depth() + 1;
      enter();
      dom_.place(json::object());  // a placeholder: the entries go to entries_
      return true;
    }
    return json_dom_parser::start_object(n);
  }

  bool key(string_t& k) override {
    if (skip_) return true;
    if (depth() == map_depth_) {
      if (!map_keys_.insert(k).second) found_.add(fmt::format("weight_map lists tensor {} twice", in_quotes(k)));
      dom_.key = std::move(k);
      return true;
    }
    return json_dom_parser::key(k);
  }

 private:
  std::string duplicate_key(const std::string& k) const override {
    return fmt::format("duplicate key {}", in_quotes(k));
  }

  bool in_map_value() const { return !skip_ && depth() == map_depth_; }

  void not_a_name(const char* type) {
    found_.add(fmt::format("weight_map: tensor {} maps to {}, expected a shard file name (a string)",
                           in_quotes(dom_.key), type));
  }

  bool add(json&& v) override {
    if (skip_) return true;
    if (in_map_value()) {
      not_a_name(v.type_name());
      return true;
    }
    return json_dom_parser::add(std::move(v));
  }

  // A container inside a weight-map value is counted (and bounded) but not built.
  bool open(json&& container) override {
    if (!skip_ && depth() != map_depth_) return json_dom_parser::open(std::move(container));
    enter();
    if (!skip_) not_a_name(container.is_array() ? "an array" : "an object");
    ++skip_;
    return true;
  }

  bool close() override {
    if (depth() == map_depth_) {
      map_depth_ = -1;
    } else if (skip_) {
      --skip_;
    } else {
      return json_dom_parser::close();
    }
    leave();
    return true;
  }

  problems& found_;
  int map_depth_ = -1;  // depth() inside the weight map, -1 outside it
  int skip_ = 0;        // open containers inside a weight-map value
  bool map_seen_ = false;
  std::unordered_set<std::string> map_keys_;
  std::vector<std::pair<std::string, std::string>> entries_;
};

std::optional<std::string> bad_shard_name(const std::string& name) {
  if (name.empty()) return "an empty shard name";
  if (name.size() > kMaxShardNameBytes)
    return fmt::format("a shard name of {} bytes (at most {})", name.size(), kMaxShardNameBytes);
  if (name.find_first_of("/\\") != std::string::npos) return "a shard name with a path separator";
  if (name.find('\0') != std::string::npos) return "a shard name with a NUL byte";
  if (name == ".") return "the shard name '.'";
  if (name.find("..") != std::string::npos) return "a shard name with '..'";
  return std::nullopt;
}

// metadata.<field> (total_size, total_parameters): a count, when present.
std::optional<uint64_t> metadata_count(const std::string& path, const json& metadata, const char* field,
                                       const char* unit) {
  if (metadata.is_null()) return std::nullopt;
  if (!metadata.is_object())
    throw input_error(fmt::format("{}: metadata is {}, expected an object", path, type_with_article(metadata)));
  if (!metadata.contains(field)) return std::nullopt;
  const json& t = metadata[field];
  const auto bad = [&](const char* why) {
    return input_error(fmt::format("{}: metadata.{} is {}: {}, expected a non-negative integer ({})", path, field,
                                   t.dump(), why, unit));
  };
  if (t.is_number_unsigned()) return t.get<uint64_t>();
  if (t.is_number_integer()) throw bad("negative");
  if (t.is_number_float()) {
    // Python's json writes a float total_size (older transformers summed float sizes) as 123.0.
    const double d = t.get<double>();
    if (!std::isfinite(d) || d < 0) throw bad("negative or not finite");
    if (d != std::floor(d)) throw bad("not a whole number");
    if (d >= 18446744073709551616.0) throw bad("larger than 2^64 - 1");
    return static_cast<uint64_t>(d);
  }
  throw bad(t.is_string() ? "a string" : t.type_name());
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> folder_entries(const std::string& folder) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(folder.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The weights config.json names as "transformers_weights", which from_pretrained reads before any
// other file: a .safetensors file or index inside the folder. A config.json that is not JSON is the
// library's to refuse; swavg reads no other field.
std::optional<std::string> explicit_weights(const std::string& folder) {
  const std::string config = path_in_folder(folder, "config.json");
  if (!is_regular_file(config)) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(read_text_file(config, kMaxConfigBytes), nullptr, false);
  if (!j.is_object() || !j.contains("transformers_weights") || j["transformers_weights"].is_null()) return std::nullopt;
  const nlohmann::json& named = j["transformers_weights"];
  const std::string name = named.is_string() ? named.get<std::string>() : std::string();
  const auto ends_with = [&name](const std::string& suffix) {
    return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  const bool inside = !name.empty() && name.front() != '/' && name != ".." && name.rfind("../", 0) != 0 &&
                      name.find("/../") == std::string::npos;
  if (!inside || !(ends_with(".safetensors") || ends_with(".safetensors.index.json")))
    throw input_error(
        fmt::format("{}: \"transformers_weights\" must name a .safetensors file or index inside the "
                    "folder, found {}",
                    config, printable(named.dump())));
  if (!is_regular_file(path_in_folder(folder, name)))
    throw io_error(fmt::format("{}: names \"transformers_weights\": \"{}\", which is not a file in {}", config,
                               printable(name), folder));
  return name;
}

struct weight_candidate {
  std::string name;
  bool index;
  file_format format;
};

// The weight files a folder may hold under `names`, in the order the library that writes them
// reads them: transformers' from_pretrained (modeling_utils' _get_resolved_checkpoint_files) takes
// model.safetensors, then its index, then pytorch_model.bin, then its index; diffusers' takes the
// safetensors index before the single file, then the .bin (and a .bin index last: diffusers reads
// it only when safetensors is not installed); PEFT's load_peft_weights has no index.
std::vector<weight_candidate> weight_candidates(const weights_naming& naming) {
  const auto single = [&naming](file_format f) { return weight_candidate{single_file_name(f, naming), false, f}; };
  const auto index = [&naming](file_format f) { return weight_candidate{index_file_name(f, naming), true, f}; };
  const file_format st = file_format::safetensors, pt = file_format::torch;
  switch (naming.names) {
    case weights_names::transformers: return {single(st), index(st), single(pt), index(pt)};
    case weights_names::diffusers: return {index(st), single(st), single(pt), index(pt)};
    case weights_names::peft: return {single(st), single(pt)};
  }
  return {};
}

bool holds_weights(const std::string& folder) {
  for (const weights_names n : kAllWeightsNames)
    for (const auto& c : weight_candidates(n))
      if (is_regular_file(path_in_folder(folder, c.name))) return true;
  return false;
}

constexpr const char* kPipelineIndexName = "model_index.json";  // a diffusers pipeline's root

[[noreturn]] void throw_no_checkpoint(const std::string& folder) {
  const std::vector<std::string> names = folder_entries(folder);
  if (std::find(names.begin(), names.end(), kPipelineIndexName) != names.end()) {
    std::vector<std::string> components;
    for (const auto& name : names)
      if (is_folder(path_in_folder(folder, name)) && holds_weights(path_in_folder(folder, name)))
        components.push_back(name + "/");
    throw input_error(fmt::format(
        "{}: a diffusers pipeline ({} found), not one model's weights: average its component folders one by one "
        "instead ({}{}), each to its own output folder",
        folder, kPipelineIndexName, components.empty() ? "none holds weights; it holds " : "",
        components.empty() ? quoted_list(names) : quoted_list(components)));
  }
  throw input_error(fmt::format(
      "{}: a folder without a checkpoint: looked for {}, {}, {} and {} (and diffusers' {}.*, PEFT's {}.*); it holds {}",
      folder, kSafetensorsSingleName, kSafetensorsIndexName, kTorchSingleName, kTorchIndexName,
      weights_stem(file_format::safetensors, weights_names::diffusers),
      weights_stem(file_format::safetensors, weights_names::peft), quoted_list(names)));
}

// The names a file argument has: its library's and variant when it is one of their weight files
// (single, index or shard: diffusion_pytorch_model.fp16.safetensors), transformers' otherwise.
weights_naming naming_of_file(const std::string& path) {
  if (const auto known = naming_of_weight_file(base_name(path))) return known->first;
  return weights_naming{};
}

// A weight file given by name (model.safetensors, pytorch_model.bin, diffusers' and PEFT's, with a
// variant or not) in a folder its library loads (a config.json or adapter_config.json beside it):
// the folder is the checkpoint's, and a folder output copies its other files as when the folder is
// given.
bool in_library_folder(const std::string& path, const weights_naming& naming) {
  const std::string name = base_name(path);
  const file_format formats[] = {file_format::safetensors, file_format::torch};
  const bool library_name = std::any_of(std::begin(formats), std::end(formats),
                                        [&](file_format f) { return name == single_file_name(f, naming); });
  if (!library_name) return false;
  const std::string folder = parent_dir(path);
  return is_regular_file(path_in_folder(folder, "config.json")) ||
         (naming.names == weights_names::peft && is_regular_file(path_in_folder(folder, "adapter_config.json")));
}

// The variants of the single files and indexes a folder holds ("fp16", "bf16"), each with the
// first such file's name, sorted by variant.
std::map<std::string, std::string> variants_in(const std::string& folder) {
  std::map<std::string, std::string> found;
  for (const auto& name : folder_entries(folder)) {
    const auto known = naming_of_weight_file(name);
    if (!known || known->first.variant.empty()) continue;
    const weights_naming& n = known->first;
    if (name == single_file_name(known->second, n) || name == index_file_name(known->second, n))
      found.emplace(n.variant, name);
  }
  return found;
}

// The first weight file of the libraries' candidates (weight_candidates) with `variant` in `at`'s
// folder, set in `at`; false when there is none.
bool choose_weights(checkpoint_location& at, const std::string& path, const std::string& variant) {
  std::string chosen;
  std::vector<std::string> others;  // weight files of other names, not read
  for (const weights_names n : kAllWeightsNames) {
    std::vector<std::string> present;
    const weight_candidate* first = nullptr;
    const std::vector<weight_candidate> candidates = weight_candidates(weights_naming(n, variant));
    for (const auto& c : candidates)
      if (is_regular_file(path_in_folder(path, c.name))) {
        present.push_back(c.name);
        if (!first) first = &c;
      }
    if (!first) continue;
    if (!chosen.empty()) {
      others.push_back(first->name);
      continue;
    }
    chosen = first->name;
    at.names = weights_naming(n, variant);
    (first->index ? at.index : at.file) = path_in_folder(path, chosen);
    if (present.size() > 1)
      spdlog::info("{}: holds {}; reading {}, as {} does", at.folder, quoted_list(present), chosen,
                   n == weights_names::transformers ? "transformers' from_pretrained"
                   : n == weights_names::diffusers  ? "diffusers' from_pretrained"
                                                    : "PEFT");
  }
  if (!others.empty())
    spdlog::info("{}: holds weights under other names too ({}); reading {}", at.folder, quoted_list(others), chosen);
  return !chosen.empty();
}

}  // namespace

bool is_index_name(const std::string& path) { return is_index_file_name(base_name(path)); }

checkpoint_location locate_checkpoint(const std::string& path) {
  checkpoint_location at;
  if (!is_folder(path)) {
    if (is_index_name(path)) {
      at.index = path;
      at.folder = parent_dir(path);
    } else {
      at.file = path;
    }
    at.names = naming_of_file(path);
    if (at.index.empty() && in_library_folder(path, at.names)) at.folder = parent_dir(path);
    return at;
  }
  at.folder = without_trailing_slash(path);
  if (const auto named = explicit_weights(at.folder)) {
    (is_index_name(*named) ? at.index : at.file) = path_in_folder(path, *named);
    at.names = naming_of_file(*named);
    return at;
  }
  // As from_pretrained without `variant`: the plain weights first. A folder holding only one
  // variant's (diffusion_pytorch_model.fp16.safetensors) is read as that variant, and the output
  // keeps its names; of several variants the user names one.
  const std::map<std::string, std::string> variants = variants_in(at.folder);
  std::vector<std::string> variant_names, variant_files;
  for (const auto& [v, file] : variants) {
    variant_names.push_back(v);
    variant_files.push_back(file);
  }
  if (choose_weights(at, path, "")) {
    if (!variants.empty())
      spdlog::info(
          "{}: holds the variant{} {} too; reading the plain weights, as from_pretrained without "
          "variant= does (pass a variant's file or index by name to average it)",
          at.folder, variants.size() == 1 ? "" : "s", quoted_list(variant_names));
    return at;
  }
  if (variants.size() > 1)
    throw input_error(
        fmt::format("{}: holds the weights of {} variants ({}: {}) and no plain ones: pass the file or index of the "
                    "variant to average by name, e.g. {}",
                    at.folder, variants.size(), quoted_list(variant_names), quoted_list(variant_files),
                    path_in_folder(at.folder, variant_files.front())));
  if (variants.empty() || !choose_weights(at, path, variant_names.front())) throw_no_checkpoint(at.folder);
  return at;
}

hf_index parse_hf_index(const std::string& path, std::string_view bytes) {
  if (bytes.size() > kMaxIndexBytes)
    throw input_error(
        fmt::format("{}: index is {} bytes, more than the limit of {} bytes", path, bytes.size(), kMaxIndexBytes));
  if (auto bad = invalid_utf8_at(bytes)) throw input_error(fmt::format("{}: not valid UTF-8 (byte {})", path, *bad));
  if (bytes.find('\0') != std::string_view::npos) throw input_error(path + ": not valid JSON: it holds a NUL byte");
  problems found;
  index_parser parser(path, found);
  const json doc = parser.parse(bytes);
  if (!doc.is_object())
    throw input_error(
        fmt::format("{}: the index is {}, expected a JSON object with a weight_map", path, type_with_article(doc)));
  if (!doc.contains("weight_map")) throw input_error(path + ": the index has no weight_map");
  if (!parser.saw_map())
    throw input_error(fmt::format("{}: weight_map is {}, expected an object of tensor name -> shard file", path,
                                  type_with_article(doc["weight_map"])));
  hf_index index;
  const json& metadata = doc.contains("metadata") ? doc["metadata"] : json();
  index.total_size = metadata_count(path, metadata, "total_size", "bytes");
  index.total_parameters = metadata_count(path, metadata, "total_parameters", "parameters");
  index.weight_map = std::move(parser.entries());
  for (const auto& [tensor, shard] : index.weight_map) {
    if (tensor.empty()) found.add("weight_map holds an empty tensor name");
    if (tensor.size() > kMaxIndexTensorNameBytes)
      found.add(fmt::format("weight_map holds a tensor name of {} bytes (at most {})", tensor.size(),
                            kMaxIndexTensorNameBytes));
    if (auto why = bad_shard_name(shard))
      found.add(fmt::format("tensor {} maps to {} {}: a shard must be a file name in the index's folder",
                            in_quotes(tensor.substr(0, 200)), *why, in_quotes(shard.substr(0, 300))));
  }
  found.throw_if_any(path);
  if (index.weight_map.empty()) throw input_error(path + ": weight_map lists no tensors");
  return index;
}

hf_index read_hf_index(const std::string& path) {
  auto file = mapped_file::open(path);
  if (file->size() > kMaxIndexBytes)
    throw input_error(
        fmt::format("{}: index is {} bytes, more than the limit of {} bytes", path, file->size(), kMaxIndexBytes));
  const hf_index index =
      parse_hf_index(path, std::string_view(reinterpret_cast<const char*>(file->data()), file->size()));
  file->throw_if_faulted();
  return index;
}

std::vector<std::string> shard_names(const hf_index& index) {
  std::vector<std::string> names;
  std::unordered_set<std::string> seen;
  for (const auto& entry : index.weight_map)
    if (seen.insert(entry.second).second) names.push_back(entry.second);
  return names;
}

state_dict load_sharded(const std::string& path, const std::string& index_path, const hf_index& index,
                        const shard_loader& load) {
  const std::string folder = parent_dir(index_path);
  const std::vector<std::string> shards = shard_names(index);
  std::unordered_map<std::string, size_t> shard_of;  // tensor -> position in shards
  std::vector<const std::string*> first_tensor;      // the first tensor listed in each shard
  {
    std::unordered_map<std::string, size_t> position;
    for (size_t s = 0; s < shards.size(); ++s) position.emplace(shards[s], s);
    first_tensor.resize(shards.size());
    for (const auto& [tensor, shard] : index.weight_map) {
      const size_t s = position.at(shard);
      shard_of.emplace(tensor, s);
      if (!first_tensor[s]) first_tensor[s] = &tensor;
    }
  }
  problems found;
  for (size_t s = 0; s < shards.size(); ++s)
    if (!exists(path_in_folder(folder, shards[s])))
      found.add(
          fmt::format("shard {} is missing (listed for tensor {})", in_quotes(shards[s]), in_quotes(*first_tensor[s])));
  found.throw_if_any(index_path);

  state_dict out;
  out.path = path;
  std::unordered_map<std::string, size_t> read_from;  // tensor -> the shard it was found in
  auto documents = std::make_shared<std::vector<std::shared_ptr<const pickle_document>>>();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = path_in_folder(folder, shards[s]);
    state_dict sd = load(file);
    const std::string where = fmt::format("shard {}", in_quotes(shards[s]));
    out.shard_metadata.emplace_back(file, sd.metadata);
    if (s == 0) {
      out.format = sd.format;
      out.key = sd.key;
      out.metadata = sd.metadata;
    }
    if (sd.format == file_format::torchscript) {
      found.add(where + " is a TorchScript archive; shards are safetensors or torch.save files");
      continue;
    }
    if (sd.format != out.format)
      found.add(fmt::format("{} is {}, the first shard {}: every shard must be one format", where,
                            format_name(sd.format), format_name(out.format)));
    if (sd.key != out.key)
      found.add(fmt::format("{} holds its state dict at '{}', the first shard at '{}'", where, sd.key, out.key));
    for (auto& t : sd.tensors) {
      auto [it, added] = read_from.emplace(t.name, s);
      if (!added) {
        found.add(
            fmt::format("tensor {} is in shard {} and in {}", in_quotes(t.name), in_quotes(shards[it->second]), where));
        continue;
      }
      const auto listed = shard_of.find(t.name);
      if (listed == shard_of.end()) {
        found.add(fmt::format("{} holds tensor {}, which the weight map does not list", where, in_quotes(t.name)));
        continue;
      }
      if (listed->second != s) {
        found.add(fmt::format("{} holds tensor {}, which the weight map lists in shard {}", where, in_quotes(t.name),
                              in_quotes(shards[listed->second])));
        continue;
      }
      // Storage keys tell shared storages apart within one file: keep them apart across shards.
      t.view.storage_key = shards[s] + "/" + t.view.storage_key;
      out.tensors.push_back(std::move(t));
    }
    for (auto& e : sd.others) out.others.push_back(std::move(e));
    for (auto& e : sd.objects) out.objects.push_back(std::move(e));
    for (auto& e : sd.opaque) out.opaque.push_back(std::move(e));
    if (sd.document) documents->push_back(sd.document);
  }
  for (const auto& [tensor, shard] : index.weight_map)
    if (!read_from.count(tensor))
      found.add(fmt::format("tensor {} is listed in shard {} but is not in it", in_quotes(tensor), in_quotes(shard)));
  found.throw_if_any(index_path);
  if (!documents->empty()) out.document = std::shared_ptr<const pickle_document>(documents, documents->front().get());

  if (index.total_size) {
    uint64_t sum = 0;
    for (const auto& t : out.tensors) sum += t.view.nbytes();
    if (sum != *index.total_size)
      spdlog::warn(
          "{}: metadata.total_size is {} but the shards' tensors hold {} bytes (older transformers counted a "
          "bool as 1/8 byte); the index is read anyway",
          index_path, *index.total_size, sum);
  }
  spdlog::debug("{}: {} tensors in {} shards", index_path, out.tensors.size(), shards.size());
  return out;
}

}  // namespace swavg
