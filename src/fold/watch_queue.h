/*
 * Which checkpoints of a training run `swavg watch` folds next, and which it passes over and why:
 * decisions over what the watcher has seen, made here without a clock or a file so that every rule
 * is tested on its own (tests/test_watch_queue.cpp). The rules:
 *   - Step order: checkpoints are folded by increasing step (ties by path), each path once, and
 *     only steps after the last one folded, so a restarted watcher continues where it stopped.
 *   - Whole and settled: a checkpoint is folded once its reader finds it whole and it has not
 *     changed (sizes, times) for `settle` seconds.
 *   - Step order before speed: a checkpoint still being written (changed within `stall` seconds)
 *     holds back every later one; one unchanged for longer is stalled (a trainer that died mid-write)
 *     and holds nothing back.
 *   - Passed over, each with its reason: no step (neither its contents nor its name give one), a
 *     step outside --from-step/--to-step, a step not after the last one folded (written late, or a
 *     second checkpoint of one step, such as Lightning's last.ckpt).
 */
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace swavg {

struct watch_entry {
  std::string path;
  std::optional<int64_t> step;
  bool whole = false;        // its reader found it whole at the last look
  double unchanged_for = 0;  // seconds its signature has stayed as it is
};

struct watch_rules {
  double settle = 1.0;  // seconds a whole checkpoint must stay unchanged
  double stall = 10.0;  // seconds after which an unfinished one no longer holds the later ones back
  std::optional<int64_t> from_step, to_step;
};

struct watch_pass {
  size_t entry;
  std::string why;
};

struct watch_decision {
  std::vector<size_t> fold;           // entries to fold now, in order
  std::vector<watch_pass> passed;     // never to be folded, with the reason
  std::vector<size_t> stalled;        // unfinished and unchanged for `stall` seconds
  std::optional<size_t> waiting_for;  // the unfinished entry that holds the later ones back
};

// Whether a checkpoint unchanged for `unchanged_for` seconds has settled: the one settle rule, which
// the watcher also asks before it reads a checkpoint at all.
bool settled(double unchanged_for, const watch_rules& rules);

// `folded`: the paths already in the average; `last_step`: the step of the last one folded.
watch_decision decide_watch(const std::vector<watch_entry>& entries, const std::set<std::string>& folded,
                            std::optional<int64_t> last_step, const watch_rules& rules);

}  // namespace swavg
