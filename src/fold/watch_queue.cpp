#include "fold/watch_queue.h"

#include <fmt/format.h>

#include <algorithm>

namespace swavg {
namespace {

// Why an entry is never to be folded, "" when it may be.
std::string pass_reason(const watch_entry& e, std::optional<int64_t> last_step, const watch_rules& r) {
  if (!e.step) return e.whole ? "no step: neither its contents nor its name give one" : "";
  const int64_t s = *e.step;
  if (r.from_step && s < *r.from_step) return fmt::format("step {} is before --from-step {}", s, *r.from_step);
  if (r.to_step && s > *r.to_step) return fmt::format("step {} is after --to-step {}", s, *r.to_step);
  if (last_step && s <= *last_step)
    return fmt::format(
        "step {} is not after step {}, the last one folded (written late, or a second checkpoint "
        "of one step)",
        s, *last_step);
  return "";
}

}  // namespace

bool settled(double unchanged_for, const watch_rules& rules) { return unchanged_for >= rules.settle; }

watch_decision decide_watch(const std::vector<watch_entry>& entries, const std::set<std::string>& folded,
                            std::optional<int64_t> last_step, const watch_rules& rules) {
  watch_decision d;
  std::vector<size_t> queue;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (folded.count(entries[i].path) != 0) continue;
    std::string why = pass_reason(entries[i], last_step, rules);
    if (!why.empty())
      d.passed.push_back({i, std::move(why)});
    else if (entries[i].step)
      queue.push_back(i);
  }
  std::sort(queue.begin(), queue.end(), [&](size_t a, size_t b) {
    const watch_entry& x = entries[a];
    const watch_entry& y = entries[b];
    return *x.step != *y.step ? *x.step < *y.step : x.path < y.path;
  });
  std::optional<int64_t> last = last_step;
  for (size_t i : queue) {
    const watch_entry& e = entries[i];
    const bool ready = e.whole && settled(e.unchanged_for, rules);
    if (!ready) {
      if (e.unchanged_for >= rules.stall) {
        d.stalled.push_back(i);
        continue;
      }
      d.waiting_for = i;
      break;
    }
    if (last && *e.step <= *last) {
      d.passed.push_back({i, fmt::format("step {} was folded just before it, from another checkpoint", *e.step)});
      continue;
    }
    d.fold.push_back(i);
    last = e.step;
  }
  return d;
}

}  // namespace swavg
