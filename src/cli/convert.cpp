#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/dry_run.h"
#include "cli/load_options.h"
#include "cli/options.h"
#include "cli/pipeline.h"
#include "cli/read_set.h"

#include <fmt/format.h>

#include "formats/file/save.h"
#include "formats/hf/sharded_input.h"
#include "formats/io/folder_writers.h"
#include "formats/io/load.h"
#include "formats/io/output_folder.h"
#include "util/atomic_dir.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/log.h"

namespace swavg {
namespace {

struct convert_options {
  std::string input;
  std::string output;
  std::optional<output_format> format;
  load_options load;
  bool force = false;
  bool drop_objects = false;
  std::string max_shard_size;
  bool dry_run = false;
  bool json = false;
};

// --dry-run: the input's tensors, each copied, and the output's files.
dry_run describe_convert(const convert_options& o, const state_dict& sd, output_format format) {
  dry_run d;
  d.command = "convert";
  d.mode = "convert";
  d.inputs.push_back(dry_run_input_of(sd));
  d.n = 1;
  d.output = without_trailing_slash(o.output);
  d.format = output_format_name(format);
  d.objects_dropped = o.drop_objects && !sd.objects.empty();
  for (const auto& e : sd.objects) d.carried.push_back({e.name, e.type, sd.path});
  for (const auto& t : sd.tensors) {
    dry_run_tensor x;
    x.action = "copy";
    x.outcome.name = t.name;
    x.outcome.action = tensor_action::latest;
    x.outcome.reason = outcome_reason::convert;
    x.outcome.count = 1;
    x.outcome.input_type = x.outcome.accumulate_type = x.outcome.output_type = t.view.type;
    x.file = o.output;
    d.bytes_read += t.view.nbytes();
    const uint64_t ws =
        t.view.is_contiguous()
            ? std::max(t.view.nbytes(), format == output_format::torch ? t.view.storage_bytes : uint64_t{0})
            : 2 * t.view.nbytes();
    d.note_working_set(ws, t.name);
    d.tensors.push_back(std::move(x));
  }
  d.peak_memory = d.largest_working_set + kOutputBufferBytes;
  return d;
}

// Resharding: the state dict as a Hugging Face folder (formats/io/output_folder.h), staged and published.
void convert_to_folder(const convert_options& o) {
  const uint64_t limit = o.max_shard_size.empty() ? kDefaultMaxShardSize : parse_shard_size(o.max_shard_size);
  if (!o.max_shard_size.empty() && o.format) refuse_shard_size(o.output, *o.format);
  output_folder out(o.output, 0, 1, o.force);
  out.refuse_not_folder();
  read_set read;
  read.add_checkpoint(o.input);
  read.check_folder_output(out, {});
  out.refuse_non_empty();
  const output_format format = o.format.value_or(output_format::safetensors);
  state_dict sd = load_state_dict(o.input, o.load);
  if (!o.drop_objects)
    check_objects_fit(o.output, format == output_format::dcp ? format : output_format::safetensors, sd.objects);
  std::vector<tensor_spec> specs;
  for (const auto& t : sd.tensors) specs.push_back(tensor_spec{t.name, t.view.type, t.view.shape, std::nullopt});
  std::map<std::string, std::string> metadata;
  if (format == output_format::safetensors) metadata = inherited_metadata({&sd});
  folder_files extra;
  const checkpoint_location source = output_source_of(o.input);
  if (!source.folder.empty()) extra = classify_folder(source.folder);
  out.use(make_folder_writer({out.path(), format, limit, source.names, source.index, o.input, sd.key}));

  if (o.dry_run) {
    const shard_layout layout = out.plan_shards(specs, metadata);
    dry_run d = describe_convert(o, sd, format);
    d.folder = true;
    add_shard_files(d, out, layout, metadata);
    total_written(d);
    for (const auto& shard : layout.shards)
      for (size_t i : shard.specs) d.tensors[i].file = shard.file;
    d.copied = extra.copied;
    return print_dry_run(d, o.json);
  }
  out.stage(source.folder, extra.copied);
  output_sink& sink = out.open(std::move(specs), metadata);
  std::vector<uint8_t> copy;
  for (const auto& t : sd.tensors) {
    if (t.view.is_contiguous()) {
      sink.write(t.view.data(), t.view.nbytes());
    } else {
      copy.resize(t.view.nbytes());
      gather_contiguous(t.view, copy.data());
      sink.write(copy.data(), copy.size());
    }
  }
  sink.commit();
  out.finish();
  spdlog::info("wrote {} in {} ({} bytes) to {}/", counted(sd.tensors.size(), "tensor"),
               counted(out.layout().shards.size(), "file"), sink.bytes_written(), out.path());
}

void run_convert(const convert_options& o) {
  if (o.json && !o.dry_run) throw usage_error("convert --json prints the plan of --dry-run: add --dry-run");
  if (is_directory_output(o.output)) return convert_to_folder(o);
  if (!o.max_shard_size.empty())
    throw usage_error(fmt::format("--max-shard-size needs a folder output (-o DIR/), not '{}'", o.output));
  const output_format format = choose_output_format(o.output, o.format);
  refuse_folder_format(o.output, format);
  read_set read;
  read.add_checkpoint(o.input);
  read.check_file_outputs({{"-o", o.output, o.force}});
  state_dict sd = load_state_dict(o.input, o.load);
  const std::vector<object_entry> objects = o.drop_objects ? std::vector<object_entry>{} : sd.objects;
  std::map<std::string, std::string> metadata;
  if (format == output_format::safetensors) metadata = inherited_metadata({&sd});
  if (o.dry_run) {
    // torch.save keeps shared storages shared: a tensor over an earlier one's storage adds no data.
    std::vector<tensor_spec> specs;
    std::map<std::string, size_t> storage_spec;
    for (const auto& t : sd.tensors) {
      const std::string id = fmt::format("{}:{}", static_cast<const void*>(t.view.owner.get()), t.view.storage_key);
      std::optional<size_t> alias;
      if (format == output_format::torch) {
        const auto [it, added] = storage_spec.emplace(id, specs.size());
        if (!added) alias = it->second;
      }
      specs.push_back(tensor_spec{t.name, t.view.type, t.view.shape, alias});
    }
    dry_run d = describe_convert(o, sd, format);
    dry_run_file f;
    f.path = o.output;
    f.tensors = specs.size();
    for (const auto& t : specs) f.data_bytes += spec_data_bytes(t);
    f.size = planned_file_size(o.output, format, specs, metadata, objects);
    d.bytes_written = f.size.bytes;
    d.bytes_written_exact = f.size.exact;
    d.files.push_back(std::move(f));
    return print_dry_run(d, o.json);
  }
  uint64_t bytes = save_state_dict(o.output, sd.tensors, format, metadata, objects);
  spdlog::info("wrote {} and {} ({} bytes) to {}", counted(sd.tensors.size(), "tensor"),
               counted(objects.size(), "other entry", "other entries"), bytes, o.output);
  if (o.drop_objects && !sd.objects.empty())
    spdlog::info("left out {} non-tensor entries (--drop-objects)", sd.objects.size());
}

}  // namespace

command setup_convert(CLI::App& parent) {
  auto o = std::make_shared<convert_options>();
  CLI::App* app = parent.add_subcommand("convert", "Write a checkpoint's state dict as torch.save or safetensors");
  app->add_option("input", o->input,
                  "Checkpoint to read (torch.save, TorchScript or safetensors; a sharded folder or index)")
      ->required();
  app->add_option("-o,--output", o->output, "File to write, or DIR/: a Hugging Face folder of shards (resharding)")
      ->required();
  add_format_option(app, o->format);
  add_load_options(app, o->load);
  app->add_flag("--force", o->force, "Replace an existing output");
  app->add_option("--max-shard-size", o->max_shard_size,
                  "With -o DIR/ (a Hugging Face folder): largest shard, e.g. 5GB, 500MB or bytes (default 5GB)");
  app->add_flag("--drop-objects", o->drop_objects,
                "Leave the non-tensor entries (_extra_state, epoch, ...) out instead of carrying them (torch.save "
                "outputs) or refusing (safetensors)");
  app->add_flag("--dry-run", o->dry_run,
                "Check everything and print the plan (tensors, output files and sizes, bytes, peak memory) instead "
                "of writing; writes nothing");
  app->add_flag("--json", o->json, "With --dry-run: print the plan as JSON on stdout");
  app->footer(
      "Examples:\n"
      "  swavg convert ckpt.pt -o model.safetensors\n"
      "  swavg convert train_state.pt --key model --strip-prefix module. --strip-prefix _orig_mod. -o weights.pt");
  return {app, [o] { run_convert(*o); }};
}

}  // namespace swavg
