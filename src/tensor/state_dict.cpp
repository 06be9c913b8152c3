#include "tensor/state_dict.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "util/error.h"

namespace swavg {

const char* format_name(file_format f) {
  switch (f) {
    case file_format::torch: return "torch";
    case file_format::torchscript: return "torchscript";
    case file_format::safetensors: return "safetensors";
  }
  return "?";
}

const char* kind_name(tensor_kind k) {
  switch (k) {
    case tensor_kind::parameter: return "parameter";
    case tensor_kind::buffer: return "buffer";
    case tensor_kind::unknown: return "unknown";
  }
  return "?";
}

void rename_entry(object_entry& e, std::string name) {
  if (name == e.name || !e.string_key) return;
  e.name = std::move(name);
  e.renamed = true;
}

namespace {

bool strips(const std::string& name, const std::string& prefix) {
  return !prefix.empty() && name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0;
}

// `name` less each of `prefixes`, once each, in order.
std::string stripped(std::string name, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes)
    if (strips(name, p)) name.erase(0, p.size());
  return name;
}

}  // namespace

namespace {

bool under(const std::string& name, const std::string& path) {
  return name.size() >= path.size() && name.compare(0, path.size(), path) == 0 &&
         (name.size() == path.size() || name[path.size()] == '.');
}

}  // namespace

void exclude_entries(state_dict& sd, const std::vector<std::string>& paths) {
  if (paths.empty()) return;
  std::vector<bool> used(paths.size(), false);
  auto excluded = [&](const std::string& name) {
    bool out = false;
    for (size_t i = 0; i < paths.size(); ++i)
      if (under(name, paths[i])) used[i] = out = true;
    return out;
  };
  sd.tensors.erase(
      std::remove_if(sd.tensors.begin(), sd.tensors.end(), [&](const named_tensor& t) { return excluded(t.name); }),
      sd.tensors.end());
  sd.objects.erase(
      std::remove_if(sd.objects.begin(), sd.objects.end(), [&](const object_entry& e) { return excluded(e.name); }),
      sd.objects.end());
  sd.others.erase(
      std::remove_if(sd.others.begin(), sd.others.end(), [&](const other_entry& o) { return excluded(o.path); }),
      sd.others.end());
  for (size_t i = 0; i < paths.size(); ++i)
    if (!used[i])
      throw usage_error(
          fmt::format("--exclude {}: {} has no entry named so, nor under {}.; 'swavg inspect {}' lists "
                      "its entries",
                      paths[i], sd.path, paths[i], sd.path));
}

void strip_prefixes(state_dict& sd, const std::vector<std::string>& prefixes) {
  if (prefixes.empty()) return;
  std::unordered_map<std::string, std::string> original;  // stripped name -> name in the file
  auto strip = [&](const std::string& name) {
    std::string out = stripped(name, prefixes);
    auto [it, fresh] = original.emplace(out, name);
    if (!fresh)
      throw input_error(
          fmt::format("{}: stripping the prefixes makes '{}' and '{}' both '{}'", sd.path, it->second, name, out));
    return out;
  };
  for (auto& t : sd.tensors) t.name = strip(t.name);
  for (auto& e : sd.objects)
    if (e.string_key) rename_entry(e, strip(e.name));
  for (auto& o : sd.others) o.path = stripped(o.path, prefixes);
}

}  // namespace swavg
