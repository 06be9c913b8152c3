#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include <limits>

#include "cli/commands.h"
#include "cli/load_options.h"
#include "cli/options.h"
#include "cli/pipeline.h"
#include "cli/read_set.h"
#include "cli/report.h"
#include "fold/config.h"
#include "formats/file/save.h"
#include "formats/io/input_kinds.h"
#include "formats/io/load.h"
#include "libtorch/bn_replay.h"
#include "libtorch/save_module.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"
#include "util/paths.h"

namespace swavg {
namespace {

struct update_bn_options {
  std::string model;
  std::string checkpoint;
  load_options load;
  dataset_options data;
  bn_options bn;
  std::string output;
  std::optional<output_format> format;
  std::string module_output;
  std::string report_file;
  bool force = false;
  bool json = false;
  bool drop_objects = false;
};

// Refuses, before anything is read, outputs that are inputs or exist (without --force).
void check_outputs(const update_bn_options& o) {
  if (o.output.empty() && o.module_output.empty())
    throw usage_error("update-bn: nothing to write: give -o OUT (the state dict) and/or --save-module OUT.ts");
  if (!o.module_output.empty() && is_regular_file(o.model) && detect_input_kind(o.model) == input_kind::export_program)
    throw usage_error(
        fmt::format("--save-module writes a TorchScript module; {} is a torch.export program, whose "
                    "updated weights -o writes (load them with ep.module().load_state_dict)",
                    o.model));
  read_set read;
  read.add_file(o.model);
  read.add_file(o.data.path);
  read.add_checkpoint(o.checkpoint);
  read.check_file_outputs(
      {{"-o", o.output, o.force}, {"--save-module", o.module_output, o.force}, {"--report", o.report_file, true}});
  reserve_report(o.report_file);
}

void log_result(const update_bn_options& o, const bn_report& r) {
  if (r.modules.empty()) return;
  size_t unreached = 0;
  for (const auto& m : r.modules) unreached += m.batches == 0;
  spdlog::info("{}: {}{} updated from {} ({}) in {:.2f} s ({:.0f} samples/s)", o.model,
               counted(r.modules.size(), "BatchNorm module"),
               unreached ? fmt::format(" ({} not reached)", unreached) : "", counted(r.batches, "batch", "batches"),
               counted(r.samples, "sample"), r.seconds, r.seconds > 0 ? r.samples / r.seconds : 0.0);
}

void run_update_bn(const update_bn_options& o) {
  require_libtorch("update-bn");
  check_outputs(o);
  const output_format format = choose_output_format(o.output.empty() ? "out.pt" : o.output, o.format);
  const dataset data = open_dataset(o.data);
  spdlog::info("{}: {} data, {} samples of {} {}{}", data.path, data.format, data.size(), dtype_name(data.samples.type),
               shape_string(data.sample_shape()), data.key.empty() ? "" : fmt::format(" (entry '{}')", data.key));
  state_dict weights;
  if (!o.checkpoint.empty()) weights = load_state_dict(o.checkpoint, o.load);
  // The checkpoint's non-tensor entries (_extra_state, ...) go into the output as fold outputs
  // carry them; a format that cannot hold them is refused before the replay.
  const std::vector<object_entry> objects = o.drop_objects ? std::vector<object_entry>{} : weights.objects;
  if (!o.output.empty()) check_objects_fit(o.output, format, objects);
  const update_bn_result result = update_batchnorm(o.model, weights.tensors, o.checkpoint, data, o.bn);
  log_result(o, result.report);

  nlohmann::ordered_json report = bn_report_object(result.report);
  report["checkpoint"] = o.checkpoint;
  report["layout"] = layout_name(result.averaged_layout ? output_layout::averaged_model : output_layout::state_dict);
  if (!o.output.empty()) {
    const uint64_t bytes = save_updated_state(o.output, format, result, weights.metadata, objects);
    spdlog::info("wrote {} and {} ({} bytes) to {}", counted(result.tensors.size(), "tensor"),
                 counted(objects.size(), "other entry", "other entries"), bytes, o.output);
    report["output"] = o.output;
    nlohmann::ordered_json carried = nlohmann::ordered_json::array();
    for (const auto& e : objects) carried.push_back({{"name", e.name}, {"type", e.type}, {"from", o.checkpoint}});
    report["carried"] = carried;
    report["objects_dropped"] = o.drop_objects && !weights.objects.empty();
  }
  if (!o.module_output.empty()) {
    const uint64_t bytes = save_module(*result.module, o.module_output);
    spdlog::info("wrote the updated TorchScript module ({} bytes) to {}", bytes, o.module_output);
    report["module_output"] = o.module_output;
  }
  emit_report(report_text(report), o.report_file, o.json);
}

}  // namespace

command setup_update_bn(CLI::App& parent) {
  auto o = std::make_shared<update_bn_options>();
  CLI::App* app = parent.add_subcommand(
      "update-bn",
      "Recompute BatchNorm running statistics by replaying data through a TorchScript model or a torch.export "
      "program (update_bn)");
  app->add_option("--model", o->model,
                  "TorchScript module (torch.jit.save of a scripted or traced model) or torch.export program "
                  "(torch.export.save of ep.run_decompositions(), train mode)")
      ->required();
  app->add_option("--data", o->data.path, "Samples to replay: .npy, torch.save'd tensor, safetensors or raw (--shape)")
      ->required();
  app->add_option("--checkpoint", o->checkpoint,
                  "Weights to load into the model first (any format, state-dict or averaged-model layout)");
  add_load_options(app, o->load);
  app->add_option("--data-key", o->data.key,
                  "Entry holding the input tensor: dotted path in a torch.save object, tensor name in safetensors");
  app->add_option("--shape", o->data.shape, "Raw data: the shape of one sample, e.g. 3,32,32")
      ->delimiter(',')
      ->check(integer_in(1, std::numeric_limits<int64_t>::max()));
  add_dtype_option(app, "--dtype", o->data.type, /*floating_only=*/false, "Raw data: element type (default float32)");
  app->add_option("--batch-size", o->bn.batch_size, "Samples per batch, as your DataLoader's batch_size")
      ->capture_default_str()
      ->check(integer_in(1, std::numeric_limits<int64_t>::max()));
  app->add_flag("--drop-last", o->bn.drop_last, "Drop the last partial batch");
  app->add_option("--max-batches", o->bn.max_batches, "Replay at most N batches (default: all)")
      ->check(integer_in(1, std::numeric_limits<int64_t>::max()));
  add_device_option(app, "--device", o->bn.device, "cpu or cuda[:N] (default cpu)");
  add_dtype_option(
      app, "--input-dtype", o->bn.input_type, /*floating_only=*/false,
      "Feed the model this dtype (default: the model's floating dtype for floating data, else as stored; a "
      "torch.export program's declared input dtype)");
  app->add_option("-o,--output", o->output, "State dict to write (torch.save or safetensors), atomically");
  add_format_option(app, o->format, false);
  app->add_option("--save-module", o->module_output, "Also write the updated TorchScript module here");
  app->add_flag("--force", o->force, "Replace existing outputs");
  app->add_flag(
      "--drop-objects", o->drop_objects,
      "Leave the checkpoint's non-tensor entries (_extra_state, ...) out instead of carrying them (torch.save "
      "outputs) or refusing (safetensors)");
  app->add_option("--report", o->report_file, "Write a JSON report to FILE");
  app->add_flag("--json", o->json, "Print the JSON report on stdout");
  app->footer(
      "The state dict keeps the checkpoint's layout (averaged-model in, averaged-model out).\n"
      "Examples:\n"
      "  swavg update-bn --model net.ts --checkpoint swa.pt --data train.npy --batch-size 128 -o swa_bn.pt\n"
      "  swavg update-bn --model net.pt2 --checkpoint swa.pt --data train.npy --batch-size 128 -o swa_bn.pt\n"
      "  swavg update-bn --model net.ts --data batches.pt --data-key images --device cuda -o bn.safetensors\n"
      "  swavg update-bn --model net.ts --data images.bin --shape 3,32,32 --dtype uint8 --input-dtype float32 "
      "--save-module net_bn.ts");
  return {app, [o] { run_update_bn(*o); }};
}

}  // namespace swavg
