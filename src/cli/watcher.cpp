#include "cli/watcher.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "cli/read_set.h"
#include "cli/report.h"
#include "fold/resume.h"
#include "fold/watch_queue.h"
#include "formats/io/checkpoint_facts.h"
#include "formats/io/load.h"
#include "formats/io/run_folder.h"
#include "util/background_priority.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/json_bytes.h"
#include "util/listing.h"
#include "util/log.h"
#include "util/mapped_file.h"
#include "util/paths.h"
#include "util/printable.h"
#include "util/progress.h"
#include "util/read_file.h"
#include "util/stop_request.h"

namespace swavg {
namespace {

using steady = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

// Steps listed as missed at most (the rest counted): a save_steps of 1 over a long gap is many.
constexpr size_t kMaxMissedListed = 1000;
// Folded checkpoints the status lists, the latest (the rest counted): the status is rewritten at
// every fold, and a list of every one would make a long run's writes grow with the square of its
// checkpoints. The output's record lists them all.
constexpr size_t kMaxFoldedListed = 100;

// What a checkpoint's path names, however the folder was spelt ("run", "./run/", a symlink to it):
// the folder resolved, the last part as written. Folded sets hold these, so that a watcher restarted
// with another spelling of the folder never folds a checkpoint twice.
std::string identity(const std::string& path) { return folder_resolved(without_trailing_slash(path)); }

double seconds_since(steady::time_point t) { return std::chrono::duration<double>(steady::now() - t).count(); }

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

// One running average on disk and what it holds.
struct watched_output {
  std::string label;
  std::string path;
  fold_config config;
  std::set<std::string> folded;  // its record's inputs (identity())
  std::optional<int64_t> last_step;
  int64_t n = 0;
};

// An entry of the run's folder as last seen.
struct seen_entry {
  run_entry entry;
  std::string id;  // identity(entry.path)
  std::string signature;
  steady::time_point since;  // signature unchanged since
  double age_at_since = 0;   // its newest file's age then (a checkpoint found old is settled)
  steady::time_point first_seen;
  std::optional<int64_t> step;
  std::string step_source;
  bool whole = false;
  bool settling = false;  // changed within --settle: not yet looked into
  std::string waiting;
  std::string checked;  // the signature its wholeness was checked at
};

struct folded_entry {
  std::string path;
  std::optional<int64_t> step;
  std::string at;
  double behind = 0;  // seconds from its last write to its fold
};

struct passed_entry {
  std::string path;
  std::optional<int64_t> step;
  std::string why;
};

class watcher {
 public:
  watcher(const fold_job& job, const watch_settings& s, std::string report_file)
      : job_(job),
        settings_(s),
        rules_{s.settle, s.stall, s.from_step, s.to_step},
        report_file_(std::move(report_file)),
        folder_(job.inputs.front()) {}
  void run();

 private:
  void open_outputs();
  void read_earlier_status();
  std::optional<int64_t> step_of_folded(const std::string& path) const;
  std::optional<int64_t> step_of_last_folded(const std::string& path) const;
  void look();
  void note_entry(const run_entry& e);
  void check_entry(seen_entry& s);
  void note_gone(const std::set<std::string>& present);
  bool folded_everywhere(const seen_entry& s) const;
  void fold_ready();
  bool fold_into(watched_output& out, seen_entry& s);
  fold_report fold_one(const watched_output& out, const std::string& path);
  std::optional<std::string> stop_reason() const;
  bool reached_until_step(const watched_output& out) const;
  bool once_waits(steady::time_point start) const;
  void write_status(const std::string& state, const std::string& folding = "");
  json status_json(const std::string& state, const std::string& folding) const;
  json missed_json() const;
  double behind() const;

  fold_job job_;
  watch_settings settings_;
  watch_rules rules_;  // fold/watch_queue.h's, from the settings
  std::string report_file_;
  std::string folder_;
  std::vector<watched_output> outputs_;
  std::map<std::string, seen_entry> seen_;                       // by path
  std::vector<folded_entry> folded_;                             // what the first output holds, in fold order
  std::map<std::string, folded_entry> earlier_folded_;           // an earlier watcher's status, by path
  std::map<std::string, std::optional<int64_t>> earlier_steps_;  // an earlier watcher's folded steps
  std::map<std::string, passed_entry> passed_;
  std::map<std::string, std::string> gone_;  // seen, deleted before folded: why it was not folded
  std::set<int64_t> seen_steps_;
  std::set<std::string> seen_paths_;  // every checkpoint seen, folded ones of earlier runs included
  std::optional<int64_t> save_steps_;
  steady::time_point last_change_ = steady::now();
  std::optional<std::string> stopped_by_;
  bool waiting_for_folder_ = false;
};

// --- outputs and what an earlier watcher left -----------------------------------------------------

void watcher::open_outputs() {
  if (job_.variants.empty())
    outputs_.push_back({"", job_.output, job_.config, {}, {}, 0});
  else
    for (const auto& v : job_.variants) outputs_.push_back({v.label, v.output, v.config, {}, {}, 0});
  std::vector<std::string> first_inputs;
  for (auto& out : outputs_) {
    if (!is_regular_file(out.path) && !is_folder(out.path)) continue;
    const resumed_average earlier = open_resumed(load_state_dict(out.path, load_options{}), out.config);
    const resume_record& r = earlier.record;
    if (out.config.mode == fold_mode::ema && r.decay && *r.decay != out.config.decay)
      throw usage_error(
          fmt::format("{}: was made with --decay {}, not {}: its average would not be one run's; give "
                      "--decay {} or another -o",
                      out.path, decimal(*r.decay), decimal(out.config.decay), decimal(*r.decay)));
    out.n = r.n;
    for (const auto& p : r.inputs) {
      const std::string id = identity(p);
      out.folded.insert(id);
      seen_paths_.insert(id);
    }
    if (!r.inputs.empty()) out.last_step = step_of_last_folded(r.inputs.back());
    if (&out == &outputs_.front()) first_inputs = r.inputs;
    spdlog::info("{}: continuing its average of {}{}", printable(out.path), counted(r.n, "checkpoint"),
                 out.last_step ? fmt::format(", the last at step {}", *out.last_step) : std::string());
  }
  // What the first output holds, in its record's order, with the earlier status's steps and times
  // where it has them: no checkpoint is read again for it (but the last, whose step decides what
  // comes next).
  for (size_t i = 0; i < first_inputs.size(); ++i) {
    const std::string& p = first_inputs[i];
    folded_entry f = earlier_folded_.count(p) != 0 ? earlier_folded_[p] : folded_entry{p, std::nullopt, "", 0.0};
    f.step = i + 1 == first_inputs.size() ? outputs_.front().last_step : step_of_folded(p);
    if (f.step) seen_steps_.insert(*f.step);
    folded_.push_back(std::move(f));
  }
}

// The steps of the checkpoints an earlier watcher folded, from its status file: those may be gone.
void watcher::read_earlier_status() {
  if (!is_regular_file(settings_.status_file)) return;
  try {
    json j = json::parse(json_text_marked(read_text_file(settings_.status_file)));
    json_unmark(j);  // paths are bytes (util/json_bytes.h)
    for (const char* list : {"folded", "folding"}) {
      if (!j.contains(list)) continue;
      const json items = j[list].is_array() ? j[list] : json::array({j[list]});
      for (const json& f : items)
        if (f.is_object() && f.contains("path") && f["path"].is_string())
          earlier_steps_[f["path"].get<std::string>()] = f.contains("step") && f["step"].is_number_integer()
                                                             ? std::optional<int64_t>(f["step"].get<int64_t>())
                                                             : std::nullopt;
    }
    for (const auto& f : j.value("folded", json::array()))
      if (f.is_object() && f.value("path", json()).is_string())
        earlier_folded_[f["path"].get<std::string>()] = {f["path"].get<std::string>(), std::nullopt, f.value("at", ""),
                                                         f.value("behind_s", 0.0)};
  } catch (const std::exception& e) {
    spdlog::warn("{}: an earlier status that cannot be read ({}); the outputs' records say what was folded",
                 settings_.status_file, e.what());
  }
}

// A folded checkpoint's step without reading it: the earlier status's, else its name's.
std::optional<int64_t> watcher::step_of_folded(const std::string& path) const {
  if (const auto it = earlier_steps_.find(path); it != earlier_steps_.end() && it->second) return it->second;
  return step_in_entry_name(path);
}

// The last folded checkpoint's step: the earlier status's, else read from it while it is there (its
// contents may hold a step its name does not), else its name's.
std::optional<int64_t> watcher::step_of_last_folded(const std::string& path) const {
  if (const auto it = earlier_steps_.find(path); it != earlier_steps_.end() && it->second) return it->second;
  try {
    if (is_regular_file(path) || is_folder(path))
      if (const auto f = read_entry_facts(path); f.step) return f.step->value;
  } catch (const error&) {
  }
  return step_in_entry_name(path);
}

// --- looking at the folder ------------------------------------------------------------------------

void watcher::look() {
  if (!is_folder(folder_)) {
    if (is_regular_file(folder_) || ::access(folder_.c_str(), F_OK) == 0)
      throw usage_error(fmt::format("{}: not a folder; swavg watch follows a training run's folder", folder_));
    if (!waiting_for_folder_) spdlog::info("{}: not there yet; waiting for the trainer to make it", printable(folder_));
    waiting_for_folder_ = true;
    return;
  }
  waiting_for_folder_ = false;
  std::set<std::string> present;
  for (const run_entry& e : list_run_folder(folder_, settings_.match)) {
    present.insert(e.path);
    const auto it = seen_.find(e.path);
    if (it == seen_.end() || !folded_everywhere(it->second)) note_entry(e);  // a folded one is done with
  }
  note_gone(present);
}

bool watcher::folded_everywhere(const seen_entry& s) const {
  return std::all_of(outputs_.begin(), outputs_.end(),
                     [&](const watched_output& o) { return o.folded.count(s.id) != 0; });
}

void watcher::note_entry(const run_entry& e) {
  const entry_snapshot snap = snapshot_entry(e.path);
  if (snap.signature.empty()) return;  // gone since the listing
  auto [it, fresh] = seen_.try_emplace(e.path);
  seen_entry& s = it->second;
  if (fresh) {
    s.entry = e;
    s.id = identity(e.path);
    seen_paths_.insert(s.id);
    s.first_seen = steady::now();
    s.step = step_in_entry_name(e.path);
    s.step_source = "name";
    last_change_ = steady::now();
    spdlog::debug("{}: seen", printable(e.path));
  }
  if (fresh || snap.signature != s.signature) {
    s.signature = snap.signature;
    s.since = steady::now();
    s.age_at_since = snap.age;
    if (!fresh) last_change_ = steady::now();
  }
  check_entry(s);
}

// Whole and its step, once it has stopped changing for --settle (a growing file is not read).
void watcher::check_entry(seen_entry& s) {
  if (s.checked == s.signature) return;
  const double unchanged = seconds_since(s.since) + s.age_at_since;
  s.settling = !settled(unchanged, rules_);
  if (s.settling) {
    s.waiting = "changed in the last " + decimal(settings_.settle) + " s (--settle)";
    return;
  }
  const entry_readiness r = check_whole(s.entry.path, job_.load);
  mapped_file::forget_faults();  // a read of a file being written may fault: that is waiting, not an error
  s.checked = s.signature;
  s.whole = r.whole;
  s.waiting = r.waiting;
  if (!r.whole) return;
  try {
    const checkpoint_facts f = read_entry_facts(s.entry.path);
    if (f.step) {
      s.step = f.step->value;
      s.step_source = f.step->source;
      seen_steps_.insert(f.step->value);
    }
    if (f.save_steps) save_steps_ = f.save_steps;
  } catch (const error& e) {
    s.whole = false;
    s.waiting = e.what();
  }
}

void watcher::note_gone(const std::set<std::string>& present) {
  for (auto it = seen_.begin(); it != seen_.end();) {
    if (present.count(it->first) != 0) {
      ++it;
      continue;
    }
    if (!folded_everywhere(it->second) && passed_.count(it->first) == 0) {
      const std::string why = it->second.whole ? "deleted before it was folded"
                                               : "deleted before it was whole (it was " + it->second.waiting + ")";
      spdlog::warn("{}: {}", printable(it->first), printable(why));
      gone_[it->first] = why;
    }
    last_change_ = steady::now();
    it = seen_.erase(it);
  }
}

// --- folding --------------------------------------------------------------------------------------

void watcher::fold_ready() {
  std::vector<std::string> paths;
  std::vector<watch_entry> entries;
  for (const auto& [path, s] : seen_) {
    paths.push_back(path);
    entries.push_back({s.id, s.step, s.whole, seconds_since(s.since) + s.age_at_since});
  }
  // Each output folds what it lacks; they agree but after a stop between two outputs' folds.
  for (auto& out : outputs_) {
    const watch_decision d = decide_watch(entries, out.folded, out.last_step, rules_);
    for (const watch_pass& p : d.passed)
      if (passed_.count(paths[p.entry]) == 0) {
        spdlog::info("{}: passed over: {}", printable(paths[p.entry]), printable(p.why));
        passed_[paths[p.entry]] = {paths[p.entry], entries[p.entry].step, p.why};
      }
    for (size_t i : d.fold) {
      if (stop_requested() || reached_until_step(out)) break;
      if (!fold_into(out, seen_.at(paths[i]))) break;
    }
  }
}

fold_report watcher::fold_one(const watched_output& out, const std::string& path) {
  fold_job j = job_;
  j.variants.clear();
  j.inputs = {path};
  j.output = out.path;
  j.config = out.config;
  j.order = "step";
  j.report_file.clear();
  j.also_read.push_back(folder_);  // the output may not lie in the watched folder (cli/read_set.h)
  j.resume = out.n > 0 ? out.path : "";
  j.force = out.n > 0;  // a rolling average replaces itself; a first fold never replaces a file
  const std::unique_ptr<fold_job_plan> plan = plan_fold_job(j);
  for (const auto& t : plan->outline.plan.tensors)
    if (t.outcome.action != tensor_action::drop && t.outcome.accumulate_type != t.outcome.output_type)
      throw usage_error(fmt::format(
          "{}: accumulated in {} but written in {}: each fold continues from the rounded output, so the watcher's "
          "average would differ from one run's; pass --output-dtype {} (exact, a wider output) or --accumulate native",
          t.name, dtype_name(t.outcome.accumulate_type), dtype_name(t.outcome.output_type),
          dtype_name(t.outcome.accumulate_type)));
  return execute_fold_job(j, *plan);
}

// Folds `s` into `out`; false when it could not be (gone or changed meanwhile: looked at again).
bool watcher::fold_into(watched_output& out, seen_entry& s) {
  const std::string& path = s.entry.path;
  write_status("folding", path);
  fold_report report;
  try {
    report = fold_one(out, path);
  } catch (const error& e) {
    mapped_file::forget_faults();
    const std::string now = snapshot_entry(path).signature;
    if (now.empty()) {
      spdlog::warn("{}: deleted while being folded into {}, which keeps its average without it", printable(path),
                   printable(out.path));
      gone_[path] = "deleted while being folded";
      return false;
    }
    if (now != s.signature) {
      spdlog::warn("{}: changed while being folded; looked at again", printable(path));
      s.checked.clear();
      s.whole = false;
      return false;
    }
    throw;
  }
  out.folded.insert(s.id);
  out.last_step = s.step;
  out.n = report.n;
  const double behind = seconds_since(s.since) + s.age_at_since;
  if (&out == &outputs_.front()) folded_.push_back({path, s.step, utc_now(), behind});  // what the first holds
  last_change_ = steady::now();
  spdlog::info("{} (step {}) -> {}: {} in the average, {:.2f} s, {:.1f} s after its last write", printable(path),
               s.step ? std::to_string(*s.step) : "?", printable(out.path), report.n, report.wall_time_s, behind);
  if (!report_file_.empty()) emit_report(fold_report_json(report), report_file_, false);
  write_status("watching");
  return true;
}

// --- stopping and the status ----------------------------------------------------------------------

bool watcher::reached_until_step(const watched_output& out) const {
  return settings_.until_step && out.last_step && *out.last_step >= *settings_.until_step;
}

std::optional<std::string> watcher::stop_reason() const {
  if (const int sig = stop_requested()) return std::string(stop_signal_name(sig));
  if (settings_.until_step &&
      std::all_of(outputs_.begin(), outputs_.end(), [&](const watched_output& o) { return reached_until_step(o); }))
    return fmt::format("--until-step {}: step {} is folded", *settings_.until_step, *outputs_.front().last_step);
  if (settings_.idle_timeout && seconds_since(last_change_) >= *settings_.idle_timeout)
    return fmt::format("--idle-timeout {}: nothing changed in {} for {} s", decimal(*settings_.idle_timeout), folder_,
                       decimal(*settings_.idle_timeout));
  return std::nullopt;
}

// --once folds what is whole when it starts: one written in the last --settle seconds is waited for
// until it settles, but not past twice that (a checkpoint still being written is not whole now).
bool watcher::once_waits(steady::time_point start) const {
  if (seconds_since(start) >= 2 * settings_.settle) return false;
  return std::any_of(seen_.begin(), seen_.end(), [](const auto& e) { return e.second.settling; });
}

// Seconds since the oldest whole checkpoint that some output still lacks stopped changing.
double watcher::behind() const {
  double most = 0;
  for (const auto& [path, s] : seen_) {
    if (!s.whole || passed_.count(path) != 0) continue;
    for (const auto& out : outputs_)
      if (out.folded.count(s.id) == 0) most = std::max(most, seconds_since(s.since) + s.age_at_since);
  }
  return most;
}

// Steps the Trainer saved (multiples of its save_steps) that were never seen: deleted before swavg looked.
json watcher::missed_json() const {
  json missed = json::array();
  for (const auto& [path, why] : gone_) missed.push_back({{"path", path}, {"why", why}});
  if (!save_steps_ || seen_steps_.empty()) return missed;
  const int64_t every = *save_steps_;
  const std::string why = fmt::format(
      "never seen: the Trainer saves every {} steps (save_steps), so this checkpoint was written and deleted "
      "before swavg looked",
      every);
  // The multiples of `every` in each gap between two steps seen (or --from-step and the first): time
  // and memory in the steps seen and the list's bound, never in a step's value.
  int64_t below = settings_.from_step ? std::max<int64_t>(*settings_.from_step, 1) - 1 : 0;
  int64_t more = 0;
  for (const int64_t seen : seen_steps_) {
    if (seen <= below) continue;
    const int64_t first = below / every + 1, last = (seen - 1) / every;  // multiples k*every in (below, seen)
    for (int64_t k = first; k <= last; ++k) {
      if (missed.size() >= kMaxMissedListed) {
        more += last - k + 1;
        break;
      }
      missed.push_back({{"step", k * every}, {"why", why}});
    }
    below = seen;
  }
  if (more > 0) missed.push_back({{"more", more}});
  return missed;
}

json watcher::status_json(const std::string& state, const std::string& folding) const {
  json j;
  j["folder"] = folder_;
  j["state"] = state;
  if (stopped_by_) j["stopped_by"] = *stopped_by_;
  j["updated"] = utc_now();
  json outs = json::array();
  for (const auto& o : outputs_) {
    json oj = {{"path", o.path}, {"n", o.n}, {"last_step", o.last_step ? json(*o.last_step) : json()}};
    if (!o.label.empty()) oj["value"] = o.label;
    outs.push_back(oj);
  }
  j["outputs"] = outs;
  j["last_step"] = outputs_.front().last_step ? json(*outputs_.front().last_step) : json();
  j["seen"] = seen_paths_.size();
  j["behind_s"] = behind();
  if (!folding.empty()) {
    const auto it = seen_.find(folding);
    const std::optional<int64_t> step = it != seen_.end() ? it->second.step : std::nullopt;
    j["folding"] = {{"path", folding}, {"step", step ? json(*step) : json()}};
  }
  json folded = json::array();
  j["folded_count"] = folded_.size();
  for (size_t i = folded_.size() > kMaxFoldedListed ? folded_.size() - kMaxFoldedListed : 0; i < folded_.size(); ++i) {
    const folded_entry& f = folded_[i];
    folded.push_back(
        {{"path", f.path}, {"step", f.step ? json(*f.step) : json()}, {"at", f.at}, {"behind_s", f.behind}});
  }
  j["folded"] = folded;
  json waiting = json::array();
  for (const auto& [path, s] : seen_)
    if (!s.whole) waiting.push_back({{"path", path}, {"step", s.step ? json(*s.step) : json()}, {"for", s.waiting}});
  j["waiting"] = waiting;
  json skipped = json::array();
  for (const auto& [path, p] : passed_)
    skipped.push_back({{"path", path}, {"step", p.step ? json(*p.step) : json()}, {"why", p.why}});
  j["skipped"] = skipped;
  j["missed"] = missed_json();
  return j;
}

void watcher::write_status(const std::string& state, const std::string& folding) {
  emit_report(report_text(status_json(state, folding), 1), settings_.status_file, false);
}

void watcher::run() {
  catch_stop_signals();
  configure_progress(progress_mode::off, false);  // a line per fold instead: the log of a job that runs for days
  if (!settings_.normal_priority) spdlog::info("running beside the trainer: {}", lower_priority());
  read_earlier_status();
  open_outputs();
  spdlog::info("watching {} for checkpoints{}", printable(folder_),
               settings_.match.empty() ? std::string() : " named " + settings_.match);
  write_status("watching");
  const steady::time_point start = steady::now();
  while (true) {
    look();
    fold_ready();
    stopped_by_ = settings_.once && !stop_requested() && !once_waits(start) ? std::optional<std::string>("--once")
                                                                            : stop_reason();
    write_status(stopped_by_ ? "stopped" : "watching");
    if (stopped_by_) break;
    wait_for_stop(settings_.poll);
  }
  std::vector<std::string> holdings;
  for (const auto& o : outputs_)
    holdings.push_back(fmt::format("{} holds {}", printable(o.path), counted(o.n, "checkpoint")));
  spdlog::info("stopped ({}): {}", *stopped_by_, fmt::format("{}", fmt::join(holdings, ", ")));
}

// The paths the watcher writes besides its outputs may be neither in the run's folder nor an output.
void check_watch_paths(const fold_job& job, const watch_settings& s, const std::string& report_file) {
  read_set read;
  read.add_file(job.inputs.front());
  std::vector<output_path> outputs;
  if (job.variants.empty())
    outputs.push_back({"-o", job.output, true});
  else
    for (const auto& v : job.variants) outputs.push_back({"-o", v.output, true});
  outputs.push_back({"--status", s.status_file, true});
  outputs.push_back({"--report", report_file, true});
  if (!job.directory) return read.check_file_outputs(outputs);
  outputs.erase(outputs.begin());
  read.check_folder_output(output_folder(job.output, 0, 1, true), outputs);
}

}  // namespace

void run_watcher(const fold_job& job, const watch_settings& settings, const std::string& report_file) {
  if (job.inputs.size() != 1)
    throw usage_error(fmt::format("swavg watch follows one training run's folder: got {}", quoted_list(job.inputs)));
  if (!is_folder(job.inputs.front()) && ::access(job.inputs.front().c_str(), F_OK) == 0)
    throw usage_error(
        fmt::format("{}: not a folder; swavg watch follows a training run's folder (give the folder "
                    "the trainer writes its checkpoints into)",
                    job.inputs.front()));
  watch_settings s = settings;
  if (s.status_file.empty())
    s.status_file =
        without_trailing_slash(job.variants.empty() ? job.output : job.variants.front().output) + ".watch.json";
  check_watch_paths(job, s, report_file);
  watcher(job, s, report_file).run();
}

}  // namespace swavg
