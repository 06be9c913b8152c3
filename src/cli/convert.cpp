#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "formats/load.h"
#include "formats/save.h"
#include "util/atomic_file.h"

namespace swavg {
namespace {

struct convert_options {
  std::string input;
  std::string output;
  std::optional<output_format> format;
  load_options load;
  bool force = false;
  bool drop_objects = false;
};

void run_convert(const convert_options& o) {
  check_output_path(o.output, checkpoint_files(o.input), o.force);
  const output_format format = choose_output_format(o.output, o.format);
  state_dict sd = load_state_dict(o.input, o.load);
  const std::vector<object_entry> objects = o.drop_objects ? std::vector<object_entry>{} : sd.objects;
  std::map<std::string, std::string> metadata;
  if (format == output_format::safetensors) metadata = inherited_metadata({&sd});
  uint64_t bytes = save_state_dict(o.output, sd.tensors, format, metadata, objects);
  spdlog::info("wrote {} tensors and {} other entries ({} bytes) to {}", sd.tensors.size(), objects.size(), bytes,
               o.output);
  if (o.drop_objects && !sd.objects.empty())
    spdlog::info("left out {} non-tensor entries (--drop-objects)", sd.objects.size());
}

}  // namespace

command setup_convert(CLI::App& parent) {
  auto o = std::make_shared<convert_options>();
  CLI::App* app = parent.add_subcommand("convert", "Write a checkpoint's state dict as torch.save or safetensors");
  app->add_option("input", o->input, "Checkpoint to read (torch.save, TorchScript or safetensors; a sharded folder or index)")->required();
  app->add_option("-o,--output", o->output, "File to write")->required();
  add_enum_option(app, "--format", o->format,
                  names_of({output_format::torch, output_format::safetensors}, output_format_name),
                  "torch or safetensors (default: from the output's extension)");
  app->add_option("--key", o->load.key, "Dotted path of the state dict inside a torch.save object, e.g. model or ema.module");
  app->add_option("--strip-prefix", o->load.strip_prefixes, "Remove this prefix from tensor names, e.g. module.");
  app->add_flag("--force", o->force, "Replace an existing output");
  app->add_flag("--drop-objects", o->drop_objects,
                "Leave the non-tensor entries (_extra_state, epoch, ...) out instead of carrying them (torch.save "
                "outputs) or refusing (safetensors)");
  app->footer(
      "Examples:\n"
      "  swavg convert ckpt.pt -o model.safetensors\n"
      "  swavg convert train_state.pt --key model --strip-prefix module. --strip-prefix _orig_mod. -o weights.pt");
  return {app, [o] { run_convert(*o); }};
}

}  // namespace swavg
