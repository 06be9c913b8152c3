#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/load_options.h"
#include "formats/io/input_kinds.h"
#include "formats/io/load.h"
#include "util/printable.h"

// Every string from the file (and the path from the command line) goes through printable(), in
// text and JSON alike, so that names cannot carry terminal escapes, line breaks, direction
// overrides or bytes that are not UTF-8 into the output.

namespace swavg {
namespace {

struct inspect_options {
  std::string input;
  load_options load;
  bool json = false;
};

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

nlohmann::ordered_json to_json(const state_dict& sd) {
  nlohmann::ordered_json j;
  j["file"] = printable(sd.path);
  j["format"] = input_kind_name(sd.kind);
  j["key"] = printable(sd.key);
  uint64_t total_bytes = 0;
  int64_t total_elements = 0;
  auto tensors = nlohmann::ordered_json::array();
  for (const auto& t : sd.tensors) {
    tensors.push_back({{"name", printable(t.name)},
                       {"dtype", dtype_name(t.view.type)},
                       {"shape", t.view.shape},
                       {"bytes", t.view.nbytes()},
                       {"kind", kind_name(t.kind)}});
    total_bytes += t.view.nbytes();
    total_elements += t.view.numel();
  }
  j["tensors"] = std::move(tensors);
  j["totals"] = {{"tensors", sd.tensors.size()}, {"elements", total_elements}, {"bytes", total_bytes}};
  auto entries = [](const std::vector<other_entry>& list) {
    auto a = nlohmann::ordered_json::array();
    for (const auto& e : list)
      a.push_back({{"path", printable(e.path)}, {"type", printable(e.type)}, {"value", printable(e.value)}});
    return a;
  };
  j["others"] = entries(sd.others);
  j["opaque"] = entries(sd.opaque);
  auto metadata = nlohmann::ordered_json::object();
  for (const auto& [k, v] : sd.metadata) metadata[printable(k)] = printable(v);
  j["metadata"] = std::move(metadata);
  return j;
}

void print_text(const state_dict& sd) {
  std::cout << printable(sd.path) << ": " << input_kind_name(sd.kind) << ", state dict at "
            << (sd.key.empty() ? "the top level" : fmt::format("'{}'", printable(sd.key))) << "\n";
  std::vector<std::string> names;
  names.reserve(sd.tensors.size());
  size_t width = 4;
  for (const auto& t : sd.tensors) {
    names.push_back(printable(t.name));
    width = std::max(width, names.back().size());
  }
  std::printf("  %-*s  %-10s  %-20s  %12s  %s\n", static_cast<int>(width), "name", "dtype", "shape", "bytes", "kind");
  uint64_t total_bytes = 0;
  int64_t total_elements = 0;
  size_t params = 0, buffers = 0;
  for (size_t i = 0; i < sd.tensors.size(); ++i) {
    const auto& t = sd.tensors[i];
    std::printf("  %-*s  %-10s  %-20s  %12llu  %s\n", static_cast<int>(width), names[i].c_str(),
                dtype_name(t.view.type), shape_string(t.view.shape).c_str(),
                static_cast<unsigned long long>(t.view.nbytes()),
                t.kind == tensor_kind::unknown ? "" : kind_name(t.kind));
    total_bytes += t.view.nbytes();
    total_elements += t.view.numel();
    params += t.kind == tensor_kind::parameter;
    buffers += t.kind == tensor_kind::buffer;
  }
  std::printf("%zu tensors, %lld elements, %s", sd.tensors.size(), static_cast<long long>(total_elements),
              human_bytes(total_bytes).c_str());
  if (params + buffers) std::printf(" (%zu parameters, %zu buffers)", params, buffers);
  std::printf("\n");
  if (!sd.others.empty()) {
    std::printf("non-tensor entries:\n");
    for (const auto& e : sd.others)
      std::printf("  %s: %s%s\n", printable(e.path).c_str(), printable(e.type).c_str(),
                  e.value.empty() ? "" : (" = " + printable(e.value)).c_str());
  }
  if (!sd.opaque.empty()) {
    std::printf("opaque objects (not interpreted, never written out):\n");
    for (const auto& e : sd.opaque) std::printf("  %s: %s\n", printable(e.path).c_str(), printable(e.type).c_str());
  }
  for (const auto& [k, v] : sd.metadata) std::printf("metadata %s: %s\n", printable(k).c_str(), printable(v).c_str());
}

void run_inspect(const inspect_options& o) {
  state_dict sd = load_state_dict(o.input, o.load);
  if (!sd.key.empty()) spdlog::info("{}: took the state dict at '{}'", printable(sd.path), printable(sd.key));
  if (o.json)
    std::cout << to_json(sd).dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) << "\n";
  else
    print_text(sd);
}

}  // namespace

command setup_inspect(CLI::App& parent) {
  auto o = std::make_shared<inspect_options>();
  CLI::App* app = parent.add_subcommand("inspect", "List a checkpoint's tensors and everything else it holds");
  app->add_option("input", o->input, "Checkpoint (torch.save, TorchScript or safetensors; told by content)")
      ->required();
  add_load_options(app, o->load);
  app->add_flag("--json", o->json, "Print one JSON object on stdout");
  app->footer(
      "Examples:\n"
      "  swavg inspect resnet18.pt\n"
      "  swavg inspect train_state.pt --key model --json | jq '.tensors[].name'");
  return {app, [o] { run_inspect(*o); }};
}

}  // namespace swavg
