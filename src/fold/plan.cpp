#include "fold/plan.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "fold/name_mismatch.h"
#include "util/error.h"
#include "util/listing.h"
#include "util/log.h"

namespace swavg {
namespace {

constexpr size_t kMaxListedDifferences = 20;

// Where tensors' kinds come from: --model, else the inputs' own (TorchScript), else names.
class kind_oracle {
 public:
  kind_oracle(const fold_config& c, const std::vector<state_dict>& inputs, const kind_table& model_kinds)
      : known_(model_kinds) {
    for (const auto& sd : inputs)
      for (const auto& t : sd.tensors)
        if (t.kind != tensor_kind::unknown) known_.emplace(t.name, t.kind);
    for (const auto& p : c.buffer_patterns) patterns_.push_back(compile_pattern(p, "--buffer"));
  }

  bool is_buffer(const std::string& name) const {
    for (const auto& re : patterns_)
      if (re.search(name)) return true;
    auto it = known_.find(name);
    if (it != known_.end()) return it->second == tensor_kind::buffer;
    return is_standard_buffer_name(name);
  }

 private:
  kind_table known_;
  std::vector<name_pattern> patterns_;
};

// One plan per name, in first-seen order, with the inputs holding it: one pass over all tensors.
// `index` maps each name to its plan.
std::vector<tensor_plan> gather_sources(const std::vector<state_dict>& inputs,
                                        std::unordered_map<std::string, size_t>& index) {
  std::vector<tensor_plan> plans;
  if (!inputs.empty()) {  // sized for the usual case, every input holding the first one's tensors
    plans.reserve(inputs.front().tensors.size());
    index.reserve(inputs.front().tensors.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i)
    for (const auto& t : inputs[i].tensors) {
      auto [it, added] = index.emplace(t.name, plans.size());
      if (added) {
        plans.emplace_back();
        plans.back().name = t.name;
        plans.back().sources.reserve(inputs.size() - i);
      }
      plans[it->second].sources.push_back(fold_source{i, &t.view});
    }
  return plans;
}

// The dtype a tensor of dtype `input` is written in: the resumed average holds what an earlier run
// wrote, so it must be this one for the average to continue.
dtype written_type(const fold_config& c, dtype input) {
  return c.output_dtype && is_floating(input) ? *c.output_dtype : input;
}

// The resumed average against the inputs, as the inputs are checked against each other: shapes,
// dtypes (the one this run writes), and, unless --allow-missing, tensors one side lacks (the
// rules' dropped ones are in no output).
void find_resume_mismatches(const fold_config& c, const std::vector<state_dict>& inputs, const resumed_average& resume,
                            const std::vector<tensor_plan>& plans, const std::unordered_map<std::string, size_t>& index,
                            std::vector<std::string>& out) {
  const std::string& path = resume.sd.path;
  std::vector<bool> have(plans.size(), false);
  for (const auto& [name, view] : resume.tensors) {
    const auto it = index.find(name);
    if (it == index.end()) {
      if (!c.allow_missing)  // as one run would list it: missing from every later checkpoint
        for (const auto& sd : inputs)
          out.push_back(fmt::format("{}: tensor '{}' is missing (present in {})", sd.path, name, path));
      continue;
    }
    have[it->second] = true;
    const fold_source& ref = plans[it->second].sources.front();
    const std::string& ref_path = inputs[ref.input].path;
    if (view->shape != ref.view->shape)
      out.push_back(fmt::format("{}: tensor '{}': expected shape {} (as in {}) but found {}", path, name,
                                shape_string(ref.view->shape), ref_path, shape_string(view->shape)));
    const dtype expected = written_type(c, ref.view->type);
    if (view->type != expected)
      out.push_back(fmt::format("{}: tensor '{}': expected dtype {} ({}) but found {}", path, name,
                                dtype_name(expected),
                                expected == ref.view->type
                                    ? fmt::format("as in {}", ref_path)
                                    : fmt::format("--output-dtype, for {} in {}", dtype_name(ref.view->type), ref_path),
                                dtype_name(view->type)));
  }
  if (c.allow_missing) return;
  for (size_t k = 0; k < plans.size(); ++k) {
    if (have[k]) continue;
    const tensor_rule* rule = match_rule(c.rules, plans[k].name);
    if (rule && rule->action == tensor_action::drop) continue;
    out.push_back(fmt::format("{}: tensor '{}' is missing (present in {})", path, plans[k].name,
                              inputs[plans[k].sources.front().input].path));
  }
}

// Every difference between the inputs (and the resumed average), or an empty list.
std::vector<std::string> find_mismatches(const fold_config& c, const std::vector<state_dict>& inputs,
                                         const resumed_average* resume, const std::vector<tensor_plan>& plans,
                                         const std::unordered_map<std::string, size_t>& index) {
  std::vector<std::string> out;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<bool> have(plans.size(), false);
    for (const auto& t : inputs[i].tensors) {
      const size_t k = index.at(t.name);
      have[k] = true;
      const fold_source& ref = plans[k].sources.front();
      if (ref.input == i) continue;
      if (t.view.shape != ref.view->shape)
        out.push_back(fmt::format("{}: tensor '{}': expected shape {} (as in {}) but found {}", inputs[i].path, t.name,
                                  shape_string(ref.view->shape), inputs[ref.input].path, shape_string(t.view.shape)));
      if (t.view.type != ref.view->type)
        out.push_back(fmt::format("{}: tensor '{}': expected dtype {} (as in {}) but found {}", inputs[i].path, t.name,
                                  dtype_name(ref.view->type), inputs[ref.input].path, dtype_name(t.view.type)));
    }
    if (!c.allow_missing)
      for (size_t k = 0; k < plans.size(); ++k)
        if (!have[k])
          out.push_back(fmt::format("{}: tensor '{}' is missing (present in {})", inputs[i].path, plans[k].name,
                                    inputs[plans[k].sources.front().input].path));
  }
  if (resume) find_resume_mismatches(c, inputs, *resume, plans, index, out);
  return out;
}

// With --allow-missing, the resumed average's tensors that no input holds: kept as a run over all
// the checkpoints would keep them (with the resumed count), each placed after the tensor that
// precedes it in the resumed average.
void add_resumed_only(const resumed_average& resume, std::vector<tensor_plan>& plans,
                      const std::unordered_map<std::string, size_t>& index) {
  std::vector<std::vector<tensor_plan>> after(plans.size() + 1);  // [0]: before every plan, [k + 1]: after plan k
  size_t slot = 0;
  for (const auto& [name, view] : resume.tensors) {
    const auto it = index.find(name);
    if (it != index.end()) {
      slot = it->second + 1;
      continue;
    }
    tensor_plan only;
    only.name = name;
    after[slot].push_back(std::move(only));
  }
  std::vector<tensor_plan> merged;
  merged.reserve(plans.size());
  for (size_t k = 0; k <= plans.size(); ++k) {
    for (auto& p : after[k]) merged.push_back(std::move(p));
    if (k < plans.size()) merged.push_back(std::move(plans[k]));
  }
  plans = std::move(merged);
}

std::vector<named_shape> names_of(const state_dict& sd) {
  std::vector<named_shape> names;
  names.reserve(sd.tensors.size());
  for (const auto& t : sd.tensors) names.push_back({t.name, t.view.shape});
  return names;
}

// What to do about the first pair of checkpoints whose names or shapes differ: the first input
// against each other one, then against the resumed average.
std::string mismatch_advice(const std::vector<state_dict>& inputs, const resumed_average* resume, bool allow_missing) {
  if (inputs.empty()) return "";
  const std::vector<named_shape> first = names_of(inputs.front());
  for (size_t i = 1; i < inputs.size(); ++i) {
    const name_set_diagnosis d = diagnose_name_sets(first, names_of(inputs[i]));
    if (d.verdict != name_set_verdict::same)
      return name_set_advice(d, inputs.front().path, inputs[i].path, allow_missing);
  }
  if (!resume) return "";
  std::vector<named_shape> resumed;
  for (const auto& [name, view] : resume->tensors) resumed.push_back({name, view->shape});
  return name_set_advice(diagnose_name_sets(first, resumed), inputs.front().path, resume->sd.path, allow_missing);
}

void throw_mismatches(const std::vector<std::string>& differences, const std::string& advice) {
  std::string msg = fmt::format("the inputs disagree ({}):", counted(differences.size(), "difference"));
  msg += listed_lines(differences, kMaxListedDifferences);
  if (differences.size() > kMaxListedDifferences)
    spdlog::debug("the inputs disagree: every difference:{}", listed_lines(differences, differences.size()));
  if (!advice.empty()) msg += "\n" + advice;
  mismatch_error e(msg);
  e.set_details(differences);
  throw e;
}

// The action for one tensor, before dtypes: see the header's list.
void choose_action(const fold_config& c, bool numeric, tensor_plan& p, const tensor_rule* rule) {
  tensor_outcome& o = p.outcome;
  if (rule) {
    o.action = rule->action;
    o.rule = rule->pattern;
    o.reason = outcome_reason::rule;
    p.rule_decay = rule->decay;
  } else if (o.buffer && c.buffers != buffer_policy::latest) {
    o.action = c.buffers == buffer_policy::first ? tensor_action::first : tensor_action::average;
    o.reason = outcome_reason::buffer;
  } else if (!numeric) {
    o.action = c.ints == int_policy::first ? tensor_action::first : tensor_action::latest;
    o.reason = outcome_reason::ints;
  } else if (o.buffer) {
    o.action = tensor_action::latest;
    o.reason = outcome_reason::buffer;
  } else {
    o.action = tensor_action::average;
    o.reason = outcome_reason::by_default;
  }
}

// An average of an integer tensor is AveragedModel's (int_average.h): SWA and EMA only, not bool.
void check_integer_average(const fold_config& c, const tensor_outcome& o) {
  const std::string why =
      o.reason == outcome_reason::rule ? fmt::format("the rule '{}'", o.rule) : std::string("--buffers average");
  if (o.input_type == dtype::bool_)
    throw usage_error(
        fmt::format("tensor '{}' is bool and {} asks to average it: PyTorch cannot (no bool subtraction); take it with "
                    "\"latest\" or \"first\" instead",
                    o.name, why));
  const auto dot = o.name.rfind('.');
  const std::string last = dot == std::string::npos ? o.name : o.name.substr(dot + 1);
  if (c.mode == fold_mode::weighted)
    throw usage_error(fmt::format(
        "integer tensor '{}': {} asks to average it, which AveragedModel defines for SWA and EMA, not for --weights; "
        "put a rule such as {{\"match\": \"{}$\", \"action\": \"latest\"}} (or \"first\") first",
        o.name, why, last));
}

// A packed tensor (float4_e2m1fn_x2, complex32, bits*) is taken from one checkpoint only when a rule
// or --buffers says so: --int is for integers, and nothing can average it.
void check_packed(const tensor_outcome& o) {
  if (!is_packed(o.input_type) || (o.action != tensor_action::average && o.reason != outcome_reason::ints)) return;
  const auto dot = o.name.rfind('.');
  const std::string last = dot == std::string::npos ? o.name : o.name.substr(dot + 1);
  throw usage_error(fmt::format(
      "tensor '{}' is {} ({}), so swavg cannot average it{}; convert the checkpoints to a dtype PyTorch computes "
      "in, or take it from one checkpoint with a rule such as {{\"match\": \"{}$\", \"action\": \"latest\"}} "
      "(or \"first\", \"drop\")",
      o.name, dtype_name(o.input_type), packed_reason(o.input_type),
      o.action == tensor_action::average
          ? fmt::format(" as {} asks", o.reason == outcome_reason::rule ? fmt::format("the rule '{}'", o.rule)
                                                                        : std::string("--buffers average"))
          : std::string(" (and --int is for integer tensors)"),
      last));
}

// The 8-bit floats have no arithmetic in PyTorch: they are averaged in a float32 or float64
// accumulator only.
void check_float8_accumulator(const tensor_outcome& o) {
  if (o.action != tensor_action::average || !is_float8(o.accumulate_type)) return;
  throw usage_error(
      fmt::format("tensor '{}' is {}, in which PyTorch has no arithmetic, so it cannot be averaged in its own dtype "
                  "(--accumulate native, or --avg-fn without --accumulate); use --accumulate float32 (the default) "
                  "or float64",
                  o.name, dtype_name(o.input_type)));
}

void decide(const fold_config& c, const kind_oracle& kinds, tensor_plan& p) {
  tensor_outcome& o = p.outcome;
  o.name = p.name;
  o.input_type = p.sources.empty() ? p.resumed->type : p.sources.front().view->type;
  o.buffer = kinds.is_buffer(p.name);
  const bool numeric = is_floating(o.input_type) || is_complex(o.input_type);
  choose_action(c, numeric, p, match_rule(c.rules, p.name));
  check_packed(o);
  if (!numeric && o.action == tensor_action::average) check_integer_average(c, o);
  o.accumulate_type = o.action == tensor_action::average ? accumulator_for(o.input_type, c.accumulate) : o.input_type;
  check_float8_accumulator(o);
  o.output_type = written_type(c, o.input_type);
  o.count = p.resumed_count + static_cast<int64_t>(p.sources.size());
}

}  // namespace

const char* reason_name(outcome_reason r) {
  switch (r) {
    case outcome_reason::rule: return "rule";
    case outcome_reason::buffer: return "buffer";
    case outcome_reason::ints: return "int";
    case outcome_reason::by_default: return "default";
    case outcome_reason::convert: return "convert";
  }
  return "?";
}

dtype accumulator_for(dtype t, accumulate_policy p) {
  if (!is_floating(t)) return t;
  switch (p) {
    case accumulate_policy::automatic:
      return (t == dtype::float16 || t == dtype::bfloat16 || is_float8(t)) ? dtype::float32 : t;
    case accumulate_policy::native: return t;
    case accumulate_policy::float32: return t == dtype::float64 ? t : dtype::float32;
    case accumulate_policy::float64: return dtype::float64;
  }
  return t;
}

uint64_t fold_working_set(const tensor_plan& p, size_t outputs) {
  const tensor_outcome& o = p.outcome;
  if (o.action == tensor_action::drop) return 0;
  std::vector<const tensor_view*> views;
  for (const auto& s : p.sources) views.push_back(s.view);
  if (p.resumed) views.push_back(p.resumed);
  if (views.empty()) return 0;
  const uint64_t numel = static_cast<uint64_t>(views.front()->numel());
  const uint64_t out_bytes = numel * itemsize(o.output_type);
  if (o.action != tensor_action::average) {
    const tensor_view& v = *(o.action == tensor_action::first ? views.front() : views.back());
    return v.nbytes() * (v.is_contiguous() ? 1 : 2) + (o.output_type != v.type ? out_bytes : 0);
  }
  const bool numeric = is_floating(o.input_type) || is_complex(o.input_type);
  const uint64_t chunk = std::min<uint64_t>(static_cast<uint64_t>(kFoldChunkElements), std::max<uint64_t>(numel, 1));
  uint64_t bytes = chunk * itemsize(o.accumulate_type);
  if (numeric && o.output_type != o.accumulate_type) bytes += chunk * itemsize(o.output_type);
  bytes *= outputs;  // each output's accumulator and output slices (native_fold.h's lanes)
  for (const tensor_view* v : views)
    bytes += numeric && v->is_contiguous() ? std::min(chunk * itemsize(v->type), v->nbytes()) : v->nbytes();
  return bytes;
}

fold_plan plan_fold(const fold_config& c, const std::vector<state_dict>& inputs, const resumed_average* resume,
                    const kind_table& model_kinds) {
  fold_plan plan;
  std::unordered_map<std::string, size_t> index;
  plan.tensors = gather_sources(inputs, index);
  const auto differences = find_mismatches(c, inputs, resume, plan.tensors, index);
  if (!differences.empty()) throw_mismatches(differences, mismatch_advice(inputs, resume, c.allow_missing));
  if (resume && c.allow_missing) add_resumed_only(*resume, plan.tensors, index);
  const kind_oracle kinds(c, inputs, model_kinds);
  for (auto& p : plan.tensors) {
    if (resume) {
      p.resumed = resume->find(p.name);
      if (p.resumed) p.resumed_count = resume->count_of(p.name);
    }
    decide(c, kinds, p);
  }
  plan.n = (resume ? resume->record.n : 0) + static_cast<int64_t>(inputs.size());
  return plan;
}

}  // namespace swavg
