#include "fold/selection.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <climits>
#include <map>
#include <numeric>

#include "util/decimal.h"
#include "util/error.h"
#include "util/printable.h"

namespace swavg {

const char* metric_rank_option(metric_rank r) {
  switch (r) {
    case metric_rank::none: return "";
    case metric_rank::top: return "--top";
    case metric_rank::bottom: return "--bottom";
  }
  return "";
}

std::vector<std::string> checkpoint_selection::kept() const {
  std::vector<std::string> out;
  for (const auto& c : candidates)
    if (c.kept) out.push_back(c.path);
  return out;
}

std::vector<std::optional<int64_t>> checkpoint_selection::kept_steps() const {
  std::vector<std::optional<int64_t>> out;
  for (const auto& c : candidates)
    if (c.kept) out.push_back(c.step ? std::optional<int64_t>(c.step->value) : std::nullopt);
  return out;
}

bool checkpoint_selection::chooses() const {
  return config.from_step || config.to_step || config.every > 1 || config.last > 0 || config.rank != metric_rank::none;
}

namespace {

bool needs_steps(const selection_config& c) {
  return c.sort_by_step || c.from_step || c.to_step || c.need_steps || !c.metric_file.empty();
}

// Which option needs the step, for the message when a checkpoint has none.
std::string step_user(const selection_config& c) {
  if (c.sort_by_step) return "--sort step";
  if (c.from_step) return "--from-step";
  if (c.to_step) return "--to-step";
  if (!c.metric_file.empty()) return "--metric-file";
  return "--weights wma-step";
}

}  // namespace

void check_selection_config(const selection_config& c) {
  if (c.every < 1) throw usage_error(fmt::format("--every: expected an integer in [1, {}], got {}", INT_MAX, c.every));
  if (c.last < 0) throw usage_error(fmt::format("--last: expected an integer in [1, {}], got {}", INT_MAX, c.last));
  if (c.from_step && c.to_step && *c.from_step > *c.to_step)
    throw usage_error(
        fmt::format("--from-step {} is past --to-step {}: the range holds no step", *c.from_step, *c.to_step));
  if ((c.rank != metric_rank::none) != !c.metric.empty())
    throw usage_error(c.metric.empty() ? fmt::format("{} N ranks by a metric: add --metric NAME (e.g. eval_loss)",
                                                     metric_rank_option(c.rank))
                                       : "--metric names what --top N or --bottom N ranks by: add one of them");
  if (c.rank != metric_rank::none && c.rank_count < 1)
    throw usage_error(
        fmt::format("{}: expected an integer in [1, {}], got {}", metric_rank_option(c.rank), INT_MAX, c.rank_count));
  if (!c.metric_file.empty() && c.metric.empty())
    throw usage_error("--metric-file needs --metric NAME: the column to read");
}

namespace {

void read_facts(std::vector<selection_candidate>& cands, const selection_config& c) {
  const bool steps = needs_steps(c);
  const bool metric = c.rank != metric_rank::none;
  if (!steps && !metric) return;
  std::optional<metric_table> table;
  if (!c.metric_file.empty())
    table = naming_option("--metric-file", [&c] { return read_metric_table(c.metric_file, c.metric); });
  for (auto& cand : cands) {
    const checkpoint_facts f = read_checkpoint_facts(cand.path, table ? std::string() : c.metric);
    cand.step = f.step;
    if (steps && !cand.step)
      throw usage_error(
          fmt::format("{}: no step found (no trainer_state.json, no top-level global_step or step entry, "
                      "no number in its name or its folder's); {} needs each checkpoint's step",
                      printable(cand.path), step_user(c)));
    if (table) {
      const auto it = table->values.find(cand.step->value);
      if (it != table->values.end())
        cand.metric = recorded_metric{it->second, fmt::format("{} at step {}", table->file, cand.step->value)};
    } else if (metric && f.metric) {
      cand.metric = f.metric;
    }
    if (metric && !cand.metric)
      cand.metric_missing = table ? fmt::format("{} has no '{}' at its step {} ({})", table->file, c.metric,
                                                cand.step->value, cand.step->source)
                                  : f.looked;
  }
}

void sort_by_step(std::vector<selection_candidate>& cands) {
  std::stable_sort(cands.begin(), cands.end(), [](const selection_candidate& a, const selection_candidate& b) {
    return a.step->value < b.step->value;
  });
}

size_t kept_count(const std::vector<selection_candidate>& cands) {
  return static_cast<size_t>(std::count_if(cands.begin(), cands.end(), [](const auto& c) { return c.kept; }));
}

void drop(selection_candidate& c, const std::string& by) {
  c.kept = false;
  c.dropped_by = by;
}

void apply_step_range(std::vector<selection_candidate>& cands, const selection_config& c) {
  for (auto& cand : cands) {
    if (c.from_step && cand.step->value < *c.from_step)
      drop(cand, "--from-step");
    else if (c.to_step && cand.step->value > *c.to_step)
      drop(cand, "--to-step");
  }
}

void apply_every_and_last(std::vector<selection_candidate>& cands, const selection_config& c) {
  size_t seen = 0;
  for (auto& cand : cands)
    if (cand.kept && ++seen % static_cast<size_t>(c.every) != 0) drop(cand, "--every");
  if (c.last <= 0) return;
  size_t left = kept_count(cands);
  for (auto& cand : cands)
    if (cand.kept && left > static_cast<size_t>(c.last)) {
      drop(cand, "--last");
      --left;
    }
}

void apply_rank(std::vector<selection_candidate>& cands, const selection_config& c) {
  if (c.rank == metric_rank::none) return;
  std::vector<size_t> order;
  for (size_t i = 0; i < cands.size(); ++i) {
    if (!cands[i].kept) continue;
    if (!cands[i].metric)
      throw usage_error(
          fmt::format("{}: no metric '{}': {}; {} ranks every checkpoint left, so leave it out or give "
                      "--metric-file",
                      printable(cands[i].path), c.metric, cands[i].metric_missing, metric_rank_option(c.rank)));
    order.push_back(i);
  }
  if (order.size() < static_cast<size_t>(c.rank_count))
    spdlog::warn("{} {} by {}: only {} checkpoint{} to rank; all are kept", metric_rank_option(c.rank), c.rank_count,
                 c.metric, order.size(), order.size() == 1 ? "" : "s");
  const bool top = c.rank == metric_rank::top;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return top ? cands[a].metric->value > cands[b].metric->value : cands[a].metric->value < cands[b].metric->value;
  });
  for (size_t k = static_cast<size_t>(c.rank_count); k < order.size(); ++k)
    drop(cands[order[k]], metric_rank_option(c.rank));
}

// The message when a rule keeps nothing: the first rule that dropped the last candidates.
[[noreturn]] void fail_empty(const std::vector<selection_candidate>& cands, const selection_config& c) {
  int64_t lo = INT64_MAX, hi = INT64_MIN;
  for (const auto& cand : cands)
    if (cand.step) {
      lo = std::min(lo, cand.step->value);
      hi = std::max(hi, cand.step->value);
    }
  const std::string by = cands.empty() ? "" : cands.back().dropped_by;
  if (by == "--every")
    throw usage_error(fmt::format("--every {} keeps none of the {} input{} given; choose K from 1 to {}", c.every,
                                  cands.size(), cands.size() == 1 ? "" : "s", cands.size()));
  throw usage_error(
      fmt::format("--from-step {} --to-step {} keeps none of the {} input{} given (their steps: {} to {})",
                  c.from_step ? std::to_string(*c.from_step) : "0", c.to_step ? std::to_string(*c.to_step) : "any",
                  cands.size(), cands.size() == 1 ? "" : "s", lo, hi));
}

// Two kept checkpoints at one step are usually one checkpoint twice: Lightning's last.ckpt and
// timm's last.pth.tar copy the latest, which a glob then folds twice.
void warn_repeated_steps(const std::vector<selection_candidate>& cands) {
  std::map<int64_t, const selection_candidate*> seen;
  for (const auto& cand : cands) {
    if (!cand.kept || !cand.step) continue;
    const auto [it, fresh] = seen.emplace(cand.step->value, &cand);
    if (!fresh)
      spdlog::warn(
          "{} and {} both record step {}: the average holds that step twice (a last.ckpt or "
          "last.pth.tar copies the latest checkpoint; leave one out if that is not meant)",
          printable(it->second->path), printable(cand.path), cand.step->value);
  }
}

}  // namespace

checkpoint_selection select_checkpoints(const std::vector<std::string>& sorted, const selection_config& c) {
  check_selection_config(c);
  checkpoint_selection s;
  s.config = c;
  for (const auto& p : sorted) {
    s.candidates.emplace_back();
    s.candidates.back().path = p;
  }
  read_facts(s.candidates, c);
  if (c.sort_by_step) sort_by_step(s.candidates);
  if (c.from_step || c.to_step) apply_step_range(s.candidates, c);
  apply_every_and_last(s.candidates, c);
  if (kept_count(s.candidates) == 0) fail_empty(s.candidates, c);
  apply_rank(s.candidates, c);
  warn_repeated_steps(s.candidates);
  return s;
}

nlohmann::ordered_json selection_object(const checkpoint_selection& s) {
  const selection_config& c = s.config;
  nlohmann::ordered_json j;
  j["sort_by_step"] = c.sort_by_step;
  if (c.from_step) j["from_step"] = *c.from_step;
  if (c.to_step) j["to_step"] = *c.to_step;
  j["every"] = c.every;
  if (c.last > 0) j["last"] = c.last;
  if (c.rank != metric_rank::none) {
    j[c.rank == metric_rank::top ? "top" : "bottom"] = c.rank_count;
    j["metric"] = c.metric;
  }
  if (!c.metric_file.empty()) j["metric_file"] = c.metric_file;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& cand : s.candidates) {
    nlohmann::ordered_json e;
    e["path"] = cand.path;
    if (cand.step) {
      e["step"] = cand.step->value;
      e["step_source"] = cand.step->source;
    }
    if (cand.metric) {
      e["metric"] = cand.metric->value;
      e["metric_source"] = cand.metric->source;
    }
    e["kept"] = cand.kept;
    if (!cand.kept) e["dropped_by"] = cand.dropped_by;
    list.push_back(std::move(e));
  }
  j["candidates"] = std::move(list);
  return j;
}

std::vector<std::string> selection_lines(const checkpoint_selection& s) {
  std::vector<std::string> out;
  for (const auto& cand : s.candidates) {
    std::string line = cand.kept ? "kept" : fmt::format("dropped by {}", cand.dropped_by);
    if (cand.step) line += fmt::format("  step {} ({})", cand.step->value, cand.step->source);
    if (cand.metric)
      line += fmt::format("  {} {} ({})", s.config.metric, decimal(cand.metric->value), cand.metric->source);
    out.push_back(fmt::format("{}  {}", line, printable(cand.path)));
  }
  return out;
}

}  // namespace swavg
