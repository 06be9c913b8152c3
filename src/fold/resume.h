/*
 * The resume record: what swavg stores beside an average so that `--resume` can continue it, as
 * JSON in a `swavg.json` record of the torch.save archive or under "swavg" in safetensors'
 * __metadata__ (loaders ignore both). Written by one run's to_json, read back by a later run's
 * resume_record_from_json; the two are the only code that knows the fields:
 *   {"version": 1, "mode": "swa"|"ema"|"weighted", "n": N, "decay": D, "warmup": W (ema only),
 *    "counts": {name: n} (tensors averaged over fewer checkpoints, --allow-missing),
 *    "power_sigma_rel": S, "last_t": T (ema --power-sigma-rel: its sigma_rel and the last input's time),
 *    "accumulate_differs": true (rounded from a wider accumulator), "layout": "state-dict"|
 *    "averaged-model", "inputs": [paths],
 *    "avg_fn": {"kind": "avg_fn"|"multi_avg_fn", "path": P, "sha256": HEX} (--avg-fn, --multi-avg-fn),
 *    "weights": [w] (weighted: normalised, in fold order), "weights_recipe": "wma" (weighted, a recipe),
 *    "selection": {...} (how the inputs were chosen: fold/selection.h's object; kept, not checked)}
 * A record is read strictly: every field has its JSON type and range (n in [1, 2^53], a count in
 * [1, n], decay in [0, 1], names from their sets), else it is an input_error naming the file and
 * the field, so a damaged or hand-edited record never continues into wrong numbers.
 */
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fold/config.h"
#include "tensor/state_dict.h"

namespace swavg {

// The metadata key ("swavg") the record is stored under.
constexpr const char* kResumeKey = "swavg";
constexpr int kResumeVersion = 1;
// The most checkpoints a record may hold: counts stay exact as doubles and n + inputs cannot overflow.
constexpr int64_t kMaxResumeCount = int64_t{1} << 53;

struct resume_record {
  int version = 1;
  fold_mode mode = fold_mode::swa;
  int64_t n = 0;                                        // checkpoints in the average
  std::optional<double> decay;                          // ema
  std::optional<warmup_kind> warmup;                    // ema
  std::optional<double> power_sigma_rel;                // ema --power-sigma-rel
  std::optional<double> last_t;                         // ema --power-sigma-rel: the last input's time
  std::vector<std::pair<std::string, int64_t>> counts;  // only where a tensor's count differs from n
  bool accumulate_differs = false;
  output_layout layout = output_layout::state_dict;
  std::vector<std::string> inputs;    // the checkpoints in the average (a resumed one's, then the run's), in fold order
  std::optional<avg_fn_spec> avg_fn;  // the function the average was made with, if not swavg's own
  std::vector<double> weights;        // weighted: each input's weight, normalised, in fold order
  std::string weights_recipe;         // weighted: the recipe they came from, "" a list
  nlohmann::ordered_json selection;   // how the inputs were chosen (fold/selection.h), null when all were taken
};

std::string to_json(const resume_record& r);
// Throws input_error, naming `source`, for text that is not a record swavg wrote.
resume_record resume_record_from_json(const std::string& text, const std::string& source);

// An earlier output to continue from: its tensors (by the model's names) and how many
// checkpoints each holds.
struct resumed_average {
  state_dict sd;
  resume_record record;
  std::vector<std::pair<std::string, const tensor_view*>> tensors;  // views into sd, in file order
  std::unordered_map<std::string, int64_t> counts;                  // record.counts, by name

  int64_t count_of(const std::string& name) const;
  const tensor_view* find(const std::string& name) const;  // nullptr: not in the average

  resumed_average() = default;
  resumed_average(const resumed_average&) = delete;  // `tensors` points into `sd`
  resumed_average(resumed_average&&) = default;

 private:
  friend resumed_average open_resumed(state_dict sd, const fold_config& c);
  std::unordered_map<std::string, size_t> index_;  // name -> position in tensors
};

// Reads the record of `sd` (an output of swavg average/ema) and checks that a fold with `c` can
// continue it. Throws usage_error (no record, another mode, another averaging function: a different
// kind or file contents, another --power-sigma-rel or none) or input_error (a malformed record, or
// a sharded folder whose shards' records describe different averages, naming those shards).
resumed_average open_resumed(state_dict sd, const fold_config& c);

}  // namespace swavg
