#include "cli/man_page.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <iostream>
#include <utility>

#include "cli/commands.h"
#include "util/error.h"
#include "util/version.h"

namespace swavg {
namespace {

// The exit codes of util/error.h, as the README's table words them.
const std::vector<std::pair<exit_code, const char*>> kExitCodes = {
    {exit_code::ok, "Success."},
    {exit_code::internal, "Internal error (a bug: please report it)."},
    {exit_code::usage,
     "Bad usage: an unknown option, a bad value, an existing output without --force, an output that is an input, "
     "not a regular file or another output."},
    {exit_code::bad_input, "Bad input: a file that is malformed, unsupported or unsafe."},
    {exit_code::mismatch, "The inputs disagree with each other (names, shapes, dtypes)."},
    {exit_code::io,
     "I/O failure: a missing or unreadable file, an input that changed while being read, or the output, the report "
     "or stdout cannot be written."},
    {exit_code::incomplete,
     "A shard-parallel job is not finished: swavg finalize ran before every worker had written its part (nothing is "
     "published; run it again later)."},
};

// The variables swavg reads, as the README documents them.
const std::vector<std::pair<const char*, const char*>> kEnvironment = {
    {"SWAVG_PREFETCH_BYTES",
     "Read ahead of the fold: N bytes split evenly between the input files (4 to 64 MiB each), with "
     "MADV_WILLNEED. Off by default."},
    {"SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN, SLURM_ARRAY_TASK_STEP, SLURM_ARRAY_TASK_COUNT",
     "For a folder output without --shard: this worker's share of a Slurm job array, (ID - MIN) / STEP of COUNT. "
     "The first of these four kinds that is set decides."},
    {"SLURM_PROCID, SLURM_NTASKS", "The same for the tasks of a Slurm job step."},
    {"RANK, WORLD_SIZE", "The same for torchrun and other launchers."},
    {"JOB_COMPLETION_INDEX", "The same for a Kubernetes Indexed Job, with --shard-count N."},
    {"GOMP_SPINCOUNT, OMP_WAIT_POLICY",
     "Unless one of them is set, swavg sets GOMP_SPINCOUNT=1000 for its OpenMP kernels (and runs itself again "
     "before reading any input, as libgomp reads it at start-up)."},
    {"SWAVG_PROGRESS",
     "auto, bar, lines or off: the default of --progress. auto draws a bar when stderr is a terminal and writes "
     "plain progress lines (one when each phase starts and ends, one every 15 s between) otherwise."},
    {"NO_COLOR", "Set and not empty: no colour in swavg's lines, unless --color always (https://no-color.org)."},
    {"COLUMNS", "The width of --help and of the progress bar when the terminal does not say it (default 80)."},
    {"SWAVG_HANDED_OVER",
     "Set by swavg when it hands a job that needs LibTorch to swavg-torch; not to be set by hand."},
};

// Text on lines of its own: roff's escape character and the minus sign escaped, and a line that
// would start with a control character made plain.
std::string roff(const std::string& text) {
  std::string out;
  bool line_start = true;
  for (char c : text) {
    if (line_start && (c == '.' || c == '\'')) out += "\\&";
    line_start = c == '\n';
    if (c == '\\')
      out += "\\e";
    else if (c == '-')
      out += "\\-";
    else
      out += c;
  }
  return out;
}

std::string bold(const std::string& text) { return "\\fB" + roff(text) + "\\fR"; }
std::string italic(const std::string& text) { return "\\fI" + roff(text) + "\\fR"; }

std::string tag_of(const option_spec& o) {
  if (!o.positional.empty()) return italic(o.positional) + (o.repeatable ? "..." : "");
  std::string tag;
  for (const auto& n : o.names) tag += (tag.empty() ? "" : ", ") + bold(n);
  if (o.kind != value_kind::none) tag += " " + italic(o.value_text);
  return tag;
}

std::string item(const option_spec& o) {
  std::string text = o.description;
  if (!o.default_value.empty()) text += fmt::format(" (default: {})", o.default_value);
  if (o.required) text += " (required)";
  return ".TP\n" + tag_of(o) + "\n" + roff(text) + "\n";
}

std::string synopsis(const command_spec& c) {
  std::string out = ".B swavg " + roff(c.name) + "\n[" + italic("OPTIONS") + "]";
  for (const auto& o : c.options) {
    if (!o.positional.empty()) {
      const std::string arg = italic(o.positional) + (o.repeatable ? "..." : "");
      out += o.required ? " " + arg : " [" + arg + "]";
    } else if (o.required) {
      out += " " + bold(o.names.back()) + " " + italic(o.value_text);
    }
  }
  return out + "\n";
}

// The footer's paragraphs that begin "Examples:", as they are; --help's other paragraphs (the
// exit codes) have sections of their own.
std::string examples(const std::string& footer) {
  std::string out;
  size_t start = 0;
  while (start < footer.size()) {
    size_t end = footer.find("\n\n", start);
    if (end == std::string::npos) end = footer.size();
    const std::string paragraph = footer.substr(start, end - start);
    const std::string heading = "Examples:\n";
    if (paragraph.rfind(heading, 0) == 0)
      out += ".PP\nExamples:\n.PP\n.RS 4\n.nf\n" + roff(paragraph.substr(heading.size())) + "\n.fi\n.RE\n";
    start = end + 2;
  }
  return out;
}

std::string options_list(const command_spec& c) {
  std::string out;
  std::string group;
  for (const auto& o : c.options) {
    const std::string heading = o.positional.empty() ? o.group : "Arguments";
    if (heading != group) {
      out += ".PP\n" + italic(heading + ":") + "\n";
      group = heading;
    }
    out += item(o);
  }
  return out;
}

std::string name_line(const std::string& description) {
  const std::string prefix = "swavg: ";
  return description.rfind(prefix, 0) == 0 ? description.substr(prefix.size()) : description;
}

}  // namespace

std::string man_page(const std::vector<command_spec>& commands) {
  const command_spec& root = commands.front();
  std::string out = fmt::format(
      ".\\\" swavg(1), generated by `swavg help-man` from the definitions that parse swavg's command line.\n"
      ".TH SWAVG 1 \"\" \"swavg {}\" \"User Commands\"\n"
      ".nh\n"
      ".ad l\n"
      ".SH NAME\n"
      "swavg \\- {}\n"
      ".SH SYNOPSIS\n"
      ".B swavg\n",
      SWAVG_VERSION, roff(name_line(root.description)));
  out += "[" + italic("OPTIONS") + "] " + italic("COMMAND") + " [" + italic("COMMAND OPTIONS") + "] [" +
         italic("ARGUMENTS") + "]\n";
  for (size_t i = 1; i < commands.size(); ++i) out += ".br\n" + synopsis(commands[i]);
  out +=
      ".SH DESCRIPTION\n"
      "swavg averages PyTorch checkpoints (torch.save, TorchScript, safetensors, Hugging Face folders, DCP and "
      "DeepSpeed checkpoints): stochastic weight averaging, exponential moving averages and BatchNorm statistics "
      "recomputation, with the semantics of torch.optim.swa_utils, streamed tensor by tensor from memory\\-mapped "
      "files. Logs go to stderr; results and \\-\\-json reports to stdout. The commands:\n";
  for (size_t i = 1; i < commands.size(); ++i)
    out += ".TP\n" + bold(commands[i].name) + "\n" + roff(commands[i].description) + "\n";
  out += examples(root.footer);
  std::vector<std::string> global;
  for (const auto& o : root.options)
    if (o.global) global.push_back(bold(o.names.front()));
  out += ".SH OPTIONS\nThese come before the command";
  if (!global.empty()) out += "; " + CLI::detail::join(global, ", ") + " after it too";
  out += ".\n";
  for (const auto& o : root.options) out += item(o);
  out += ".SH COMMANDS\n";
  for (size_t i = 1; i < commands.size(); ++i) {
    const command_spec& c = commands[i];
    out += ".SS \"swavg " + roff(c.name) + "\"\n" + roff(c.description) + "\n.PP\n" + synopsis(c);
    out += options_list(c);
    out += examples(c.footer);
  }
  out += ".SH EXIT STATUS\n";
  for (const auto& [code, meaning] : kExitCodes)
    out += fmt::format(".TP\n.B {}\n{}\n", static_cast<int>(code), roff(meaning));
  out += ".SH ENVIRONMENT\n";
  for (const auto& [name, meaning] : kEnvironment) out += ".TP\n" + bold(name) + "\n" + roff(meaning) + "\n";
  out +=
      ".SH FILES\n"
      ".TP\n" +
      bold("swavg-torch") +
      "\nThe same program linked with LibTorch, installed beside swavg (/usr/bin/swavg-torch). swavg runs it, "
      "with the same command line, for jobs that need LibTorch: update\\-bn, \\-\\-device cuda, "
      "\\-\\-avg\\-fn.\n"
      ".TP\n" +
      italic("DIR") +
      ".partial/\nThe workers' files of a shard\\-parallel run (swavg\\-plan.json, "
      "swavg\\-worker\\-I\\-of\\-N.json and their shards), until swavg finalize publishes DIR/.\n"
      ".TP\n"
      "/usr/share/bash\\-completion/completions/swavg, /usr/share/zsh/vendor\\-completions/_swavg, "
      "/usr/share/fish/vendor_completions.d/swavg.fish\n"
      "The completion scripts the package installs; swavg completion bash|zsh|fish prints them.\n"
      ".SH SEE ALSO\n"
      "swavg \\-\\-help and swavg " +
      italic("COMMAND") +
      " \\-\\-help print the same options; the README of the source tree (/usr/share/doc/swavg/README.md "
      "where the package installs it) has the details: formats, security, performance, multi\\-machine runs. "
      "PyTorch's torch.optim.swa_utils is the reference for average, ema and update\\-bn.\n";
  return out;
}

command setup_help_man(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("help-man", "Print the man page swavg(1) in roff");
  app->group("");  // hidden: the build runs it
  return {app, [&parent] { std::cout << man_page(commands_of(parent)); }};
}

}  // namespace swavg
