/*
 * Folds checkpoints, one after the other, into a running average and streams the result out.
 *
 * With n the number of checkpoints already folded (the first is copied, n = 0 -> 1):
 *   SWA       avg = avg + (x - avg) / (n + 1)       (n + 1 an int64 0-dim tensor: the expression
 *                                                    AveragedModel.update_parameters uses on CPU)
 *   EMA       avg = avg.lerp(x, 1 - decay_n)        (get_ema_multi_avg_fn; decay_n from --warmup)
 *   weighted  avg = avg.lerp(x, w_n / (w_1 + ... + w_n))
 * elementwise in the accumulator dtype, rounding each element exactly as the ATen kernels PyTorch
 * runs (swavg's own kernels where they reproduce ATen, ATen itself elsewhere; see fold_plan.h), so
 * results equal PyTorch's bit for bit.
 *
 * Work is streamed tensor by tensor across all inputs (all memory-mapped), and in slices of a
 * tensor (each element is computed alone, so slicing changes no bit): each
 * finished tensor is written and its input pages released, so peak memory stays a few times the
 * largest tensor, whatever the number of checkpoints or the model size. Every input is checked
 * against the others (names, shapes, dtypes) before a byte is written.
 */
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "core/rules.h"
#include "core/state_dict.h"
#include "io/load.h"

namespace swavg {

enum class fold_mode { swa, ema, weighted };
enum class buffer_policy { latest, average };
enum class int_policy { latest, first, error };
enum class warmup_kind { none, torch_ema, power };
enum class accumulate_policy { automatic, native, float32, float64 };
enum class output_layout { state_dict, averaged_model };

const char* mode_name(fold_mode m);  // "swa", "ema", "weighted"

struct fold_config {
  fold_mode mode = fold_mode::swa;
  double decay = 0.999;
  warmup_kind warmup = warmup_kind::none;
  double inv_gamma = 1.0;
  double power = 2.0 / 3.0;
  double min_decay = 0.0;
  std::vector<double> weights;  // weighted mode: one per input, in fold order
  buffer_policy buffers = buffer_policy::latest;
  int_policy ints = int_policy::latest;
  std::vector<tensor_rule> rules;
  std::vector<std::string> buffer_patterns;  // extra buffer names (regex, searched)
  accumulate_policy accumulate = accumulate_policy::automatic;
  std::optional<dtype> output_dtype;  // for floating tensors
  bool allow_missing = false;
  bool allow_nonfinite = false;
  std::string device = "cpu";
  output_layout layout = output_layout::state_dict;
};

struct fold_job {
  std::vector<std::string> inputs;  // in fold order
  load_options load;
  std::string output;
  std::string format;  // "", "torch", "safetensors"
  bool force = false;
  std::string resume;  // an earlier output to continue from
  std::string model;   // TorchScript whose parameter/buffer split is used
  fold_config config;
};

struct tensor_outcome {
  std::string name;
  tensor_action action;
  bool buffer = false;
  std::string rule;  // pattern of the rule that decided, if any
  std::string reason;  // "rule", "int", "buffer", "default"
  int64_t count = 0;   // checkpoints folded into it (including resumed ones)
  dtype input_type = dtype::float32;
  dtype accumulate_type = dtype::float32;
  dtype output_type = dtype::float32;
};

struct fold_report {
  std::vector<std::string> inputs;
  std::string resume;
  std::string output;
  std::string format;
  fold_mode mode = fold_mode::swa;
  double decay = 0.0;
  int64_t n = 0;  // checkpoints in the average, resumed ones included
  std::vector<tensor_outcome> tensors;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  double wall_time_s = 0.0;
};

// Runs the whole job; throws swavg::error subclasses. Nothing is written unless it succeeds.
fold_report run_fold(const fold_job& job);

// The report as one JSON object (mode, n, inputs, tensors, buffers, rules, bytes, time).
std::string fold_report_json(const fold_report& report);

// The decay used when folding a checkpoint into an average of n (n >= 1), for EMA.
double ema_decay_at(const fold_config& c, int64_t n, std::optional<double> rule_decay);

}  // namespace swavg
