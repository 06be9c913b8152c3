/*
 * `swavg finalize OUT/`: publishes what shard-parallel workers left in OUT.partial/ once every one of
 * them is done (formats/io/worker_files.h checks the plan, the manifests and the files, and makes it safe
 * to run again, concurrently or after a kill).
 */
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "cli/commands.h"
#include "cli/report.h"
#include "formats/io/worker_files.h"
#include "util/atomic_dir.h"
#include "util/log.h"

namespace swavg {
namespace {

struct finalize_options {
  std::string output;
  bool no_verify = false;
  bool force = false;
  bool json = false;
};

void run_finalize(const finalize_options& o) {
  const finalize_result r = finalize_partial(o.output, !o.no_verify, o.force);
  if (r.already_published) {
    spdlog::info("{}: published already (no {}.partial/ and no finalize record beside it): nothing to do", o.output,
                 without_trailing_slash(o.output));
    emit_report(finalize_report_json(o.output, r, !o.no_verify), "", o.json);
    return;
  }
  spdlog::info("{}: published {} written by {} ({} bytes of tensors){}", o.output,
               counted(r.plan.layout.shards.size(), "file"), counted(r.plan.workers, "worker"),
               r.plan.layout.total_size, o.no_verify ? "" : ", every file's sha256 checked");
  emit_report(finalize_report_json(o.output, r, !o.no_verify), "", o.json);
}

}  // namespace

command setup_finalize(CLI::App& parent) {
  auto o = std::make_shared<finalize_options>();
  CLI::App* app = parent.add_subcommand(
      "finalize", "Publish OUT/ from OUT.partial/ once every shard-parallel worker (--shard I/N) has written its part");
  app->add_option("output", o->output, "The folder the workers wrote (their -o DIR/)")->required();
  app->add_flag("--no-verify", o->no_verify, "Check file sizes only, not their sha256");
  app->add_flag("--force", o->force, "Replace an existing non-empty OUT/");
  app->add_flag("--json", o->json, "Print the JSON report on stdout");
  app->footer(
      "Exit codes: 6 while a worker's manifest is missing or a worker or another finalize holds OUT.partial/ "
      "(nothing published; run it again), 3 for a malformed plan or manifest, 4 for manifests of another plan, 5 "
      "for a file missing or changed. A finalize killed at any point is finished by the next one.");
  return {app, [o] { run_finalize(*o); }};
}

}  // namespace swavg
