#include "formats/io/checkpoint_facts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "formats/core/json_dom.h"
#include "formats/io/input_kinds.h"
#include "formats/pickle/pickle.h"
#include "formats/pickle/pickle_query.h"
#include "formats/torch/torch_file.h"
#include "tensor/tensor_view.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/listing.h"
#include "util/paths.h"
#include "util/printable.h"
#include "util/read_file.h"

namespace swavg {
namespace {

using json = nlohmann::json;

// The largest whole number every smaller one of which a double holds exactly: a step written as a
// decimal ("500.0") is read only up to it, so that no step is rounded into another.
constexpr double kMaxExactStep = 9007199254740992.0;  // 2^53

// The most containers a trainer_state.json or a metric table may nest (Trainer writes 3).
constexpr int kMaxJsonDepth = 64;

// JSON read through the bounded DOM parser (formats/core/json_dom.h): nesting bounded, a duplicate
// key refused rather than one of its values silently kept.
class table_parser : public json_dom_parser {
 public:
  explicit table_parser(std::string file)
      : json_dom_parser(std::move(file), kMaxJsonDepth, fmt::format("JSON nests deeper than {} levels", kMaxJsonDepth),
                        "not valid JSON (a NaN or Infinity, which Python's json writes, is not JSON either): ") {}

 private:
  std::string duplicate_key(const std::string& k) const override {
    return fmt::format("the key \"{}\" appears twice in one object", printable(k));
  }
};

json parse_json_file(const std::string& file, const std::string& text) { return table_parser(file).parse(text); }

// A JSON number as an int64 step, or nullopt.
std::optional<int64_t> json_step(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= 0 && d <= kMaxExactStep && d == std::floor(d)) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

double finite_metric(const std::string& where, const std::string& metric, double v) {
  if (!std::isfinite(v))
    throw input_error(fmt::format("{}: metric '{}' is {}, which cannot be ranked; leave the checkpoint out", where,
                                  metric, decimal(v)));
  return v;
}

// --- Hugging Face Trainer folders -------------------------------------------------------------

// The keys a Trainer metric NAME is logged under, as Trainer reads metric_for_best_model: with the
// eval_ prefix it adds when NAME has none ("loss" is eval_loss), then NAME itself (a metric logged
// by hand).
std::vector<std::string> trainer_metric_keys(const std::string& metric) {
  if (metric.rfind("eval_", 0) == 0) return {metric};
  return {"eval_" + metric, metric};
}

std::optional<std::string> trainer_state_of(const std::string& path) {
  const std::string folder = is_folder(path) ? path : parent_dir(path);
  const std::string state = path_in_folder(folder, "trainer_state.json");
  if (!is_regular_file(state)) return std::nullopt;
  return state;
}

// The last value of `key` logged at `step` in a log_history, or nullopt.
std::optional<double> logged_at(const json& history, int64_t step, const std::string& key, const std::string& file) {
  std::optional<double> value;
  for (const json& e : history) {
    if (!e.is_object() || !e.contains("step") || json_step(e["step"]) != step || !e.contains(key)) continue;
    if (!e[key].is_number())
      throw input_error(fmt::format("{}: log_history at step {}: '{}' is {}, not a number", file, step, key,
                                    printable(e[key].dump())));
    value = finite_metric(file, key, e[key].get<double>());
  }
  return value;
}

void facts_from_trainer_state(const std::string& state, const std::string& metric, checkpoint_facts& f) {
  const json j = parse_json_file(state, read_text_file(state, kMaxMetricFileBytes));
  if (!j.is_object() || !j.contains("global_step") || !json_step(j["global_step"]))
    throw input_error(fmt::format("{}: expected \"global_step\": a non-negative integer, as Trainer writes it", state));
  const int64_t step = *json_step(j["global_step"]);
  f.step = recorded_step{step, "trainer_state.json global_step"};
  if (j.contains("save_steps")) {
    const auto every = json_step(j["save_steps"]);
    if (every && *every > 0) f.save_steps = every;
  }
  if (metric.empty()) return;
  const json history = j.contains("log_history") && j["log_history"].is_array() ? j["log_history"] : json::array();
  for (const std::string& key : trainer_metric_keys(metric))
    if (const auto v = logged_at(history, step, key, state)) {
      f.metric = recorded_metric{*v, fmt::format("trainer_state.json log_history '{}'", key)};
      return;
    }
  std::vector<std::string> at_step;
  for (const json& e : history)
    if (e.is_object() && e.contains("step") && json_step(e["step"]) == step)
      for (const auto& item : e.items())
        if (std::find(at_step.begin(), at_step.end(), item.key()) == at_step.end()) at_step.push_back(item.key());
  if (!f.metric)
    f.looked = fmt::format("{}: log_history has no '{}' at step {} (the global_step){}", state, metric, step,
                           at_step.empty() ? std::string(": nothing was logged at that step")
                                           : fmt::format("; logged there: {}", quoted_list(at_step)));
}

// --- torch.save files (Lightning, timm, plain training scripts) --------------------------------

std::optional<double> scalar_of(const pickle_node* n, torch_storage_reader& storages, const std::string& what) {
  if (!n) return std::nullopt;
  if (n->kind == pickle_kind::floating) return n->float_value;
  if (n->kind == pickle_kind::integer) return static_cast<double>(n->int_value);
  if (n->kind != pickle_kind::tensor) return std::nullopt;
  const tensor_view v = storages.view_of(what, *n->tensor);
  if (v.numel() != 1) return std::nullopt;
  double out = 0.0;
  uint8_t bytes[8] = {};
  if (itemsize(v.type) > sizeof bytes) return std::nullopt;
  gather_contiguous(v, bytes);
  switch (v.type) {
    case dtype::float32: {
      float x;
      std::memcpy(&x, bytes, 4);
      out = x;
      break;
    }
    case dtype::float64: std::memcpy(&out, bytes, 8); break;
    case dtype::int64: {
      int64_t x;
      std::memcpy(&x, bytes, 8);
      out = static_cast<double>(x);
      break;
    }
    case dtype::int32: {
      int32_t x;
      std::memcpy(&x, bytes, 4);
      out = x;
      break;
    }
    default: return std::nullopt;
  }
  return out;
}

std::optional<int64_t> integer_entry(const pickle_node* root, const char* key) {
  const pickle_node* n = find_entry(root, key);
  if (n && n->kind == pickle_kind::integer && n->int_value >= 0) return n->int_value;
  return std::nullopt;
}

// Lightning's callback state: callbacks["ModelCheckpoint{...}"] = {"monitor": NAME, "current_score": x, ...}.
std::optional<double> lightning_score(const pickle_node* root, torch_storage_reader& storages, const std::string& path,
                                      const std::string& metric) {
  const pickle_node* callbacks = find_entry(root, "callbacks");
  if (!callbacks || callbacks->kind != pickle_kind::dict) return std::nullopt;
  for (const auto& [key, state] : callbacks->entries) {
    if (!key || key->kind != pickle_kind::string || key->text.rfind("ModelCheckpoint", 0) != 0) continue;
    const pickle_node* monitor = find_entry(state, "monitor");
    if (!monitor || monitor->kind != pickle_kind::string || monitor->text != metric) continue;
    const auto v =
        scalar_of(find_entry(state, "current_score"), storages, fmt::format("{} current_score", printable(key->text)));
    if (v) return finite_metric(path, metric, *v);
  }
  return std::nullopt;
}

// timm's train checkpoints: `metric` holds the eval metric its args named (args.eval_metric, "top1").
std::optional<double> timm_metric(const pickle_node* root, torch_storage_reader& storages, const std::string& path,
                                  const std::string& metric) {
  const pickle_node* args = find_entry(root, "args");
  if (!args || args->kind != pickle_kind::opaque || !args->call) return std::nullopt;
  const pickle_node* named = find_entry(args->call->state, "eval_metric");
  if (!named || named->kind != pickle_kind::string || named->text != metric) return std::nullopt;
  const auto v = scalar_of(find_entry(root, "metric"), storages, "entry 'metric'");
  if (!v) return std::nullopt;
  return finite_metric(path, metric, *v);
}

void facts_from_torch_file(const std::string& path, const std::string& metric, checkpoint_facts& f) {
  if (!is_regular_file(path)) return;
  const input_probe probe = probe_input(path);  // the ZIP archive only: the legacy format is torch_legacy
  if (claim_input(probe).kind != input_kind::torch) return;
  const torch_archive archive = open_torch_archive(probe.file, "a torch.save checkpoint");
  const pickle_node* root = archive.doc->root();
  torch_storage_reader storages = archive_storages(archive);
  if (!f.step) {
    if (const auto s = integer_entry(root, "global_step"))
      f.step = recorded_step{*s, "entry 'global_step'"};
    else if (const auto t = integer_entry(root, "step"))
      f.step = recorded_step{*t, "entry 'step'"};
  }
  if (metric.empty() || f.metric) return;
  if (const auto v = scalar_of(find_entry(root, metric), storages, fmt::format("entry '{}'", metric))) {
    f.metric = recorded_metric{finite_metric(path, metric, *v), fmt::format("entry '{}'", metric)};
  } else if (const auto s = lightning_score(root, storages, path, metric)) {
    f.metric = recorded_metric{*s, "ModelCheckpoint current_score"};
  } else if (const auto t = timm_metric(root, storages, path, metric)) {
    f.metric = recorded_metric{*t, fmt::format("entry 'metric' (timm: args.eval_metric is '{}')", metric)};
  }
}

// --- names ---------------------------------------------------------------------------------------

// The name without up to two extensions of letters and digits that start with a letter (".pt",
// ".pth.tar", ".safetensors", ".ckpt").
std::string name_stem(std::string name) {
  for (int k = 0; k < 2; ++k) {
    const size_t dot = name.rfind('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 >= name.size() ||
        !std::isalpha(static_cast<unsigned char>(name[dot + 1])))
      break;
    bool alnum = true;
    for (size_t i = dot + 1; i < name.size(); ++i) alnum &= std::isalnum(static_cast<unsigned char>(name[i])) != 0;
    if (!alnum) break;
    name.resize(dot);
  }
  return name;
}

std::optional<int64_t> digits_value(std::string_view d) {
  int64_t v = 0;
  for (char c : d) {
    const int digit = c - '0';
    if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) return std::nullopt;
    v = v * 10 + digit;
  }
  return v;
}

// Where `key=` starts an entry of a Lightning name (at the start or after '-').
size_t lightning_entry(const std::string& name, const std::string& key) {
  const std::string needle = key + "=";
  for (size_t at = name.find(needle); at != std::string::npos; at = name.find(needle, at + 1))
    if (at == 0 || name[at - 1] == '-') return at + needle.size();
  return std::string::npos;
}

std::optional<int64_t> step_in_one_name(const std::string& name) {
  const size_t at = lightning_entry(name, "step");
  if (at != std::string::npos) {
    size_t end = at;
    while (end < name.size() && std::isdigit(static_cast<unsigned char>(name[end]))) ++end;
    return end > at ? digits_value(std::string_view(name).substr(at, end - at)) : std::nullopt;
  }
  if (name.find('=') != std::string::npos) return std::nullopt;
  const std::string stem = name_stem(name);
  size_t end = stem.size();
  while (end > 0 && !std::isdigit(static_cast<unsigned char>(stem[end - 1]))) --end;
  if (end == 0) return std::nullopt;
  size_t begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(stem[begin - 1]))) --begin;
  return digits_value(std::string_view(stem).substr(begin, end - begin));
}

std::optional<double> metric_in_name(const std::string& path, const std::string& metric) {
  const std::string name = base_name(without_trailing_slash(path));
  const size_t at = lightning_entry(name, metric);
  if (at == std::string::npos) return std::nullopt;
  size_t end = at;
  if (end < name.size() && (name[end] == '-' || name[end] == '+')) ++end;
  while (end < name.size() && (std::isdigit(static_cast<unsigned char>(name[end])) || name[end] == '.')) ++end;
  std::string text = name.substr(at, end - at);
  while (!text.empty() && text.back() == '.') text.pop_back();  // the extension's dot
  if (text.empty() || text == "-" || text == "+") return std::nullopt;
  const auto v = parse_decimal(text);
  if (!v) return std::nullopt;
  return finite_metric(path, metric, *v);
}

}  // namespace

std::optional<int64_t> step_in_name(const std::string& path) {
  const std::string p = without_trailing_slash(path);
  if (const auto s = step_in_one_name(base_name(p))) return s;
  if (is_folder(p)) return std::nullopt;
  const std::string folder = parent_dir(p);
  if (folder == "." || folder == "/") return std::nullopt;
  return step_in_one_name(base_name(folder));
}

std::optional<int64_t> step_in_entry_name(const std::string& path) {
  return step_in_one_name(base_name(without_trailing_slash(path)));
}

checkpoint_facts read_entry_facts(const std::string& path) {
  checkpoint_facts f;
  if (is_folder(path)) {
    const std::string state = path_in_folder(without_trailing_slash(path), "trainer_state.json");
    if (is_regular_file(state)) facts_from_trainer_state(state, "", f);
  } else {
    facts_from_torch_file(path, "", f);
  }
  if (!f.step)
    if (const auto s = step_in_entry_name(path)) f.step = recorded_step{*s, "name"};
  return f;
}

checkpoint_facts read_checkpoint_facts(const std::string& path, const std::string& metric) {
  checkpoint_facts f;
  std::vector<std::string> looked;
  if (const auto state = trainer_state_of(path)) {
    facts_from_trainer_state(*state, metric, f);
    if (!f.metric && !metric.empty()) looked.push_back(f.looked);
  }
  if (!f.step || (!metric.empty() && !f.metric)) {
    facts_from_torch_file(path, metric, f);
    if (!metric.empty() && !f.metric && is_regular_file(path))
      looked.push_back(fmt::format("no top-level '{}' and no Lightning ModelCheckpoint monitoring it", metric));
  }
  if (!f.step)
    if (const auto s = step_in_name(path)) f.step = recorded_step{*s, "name"};
  if (!metric.empty() && !f.metric) {
    if (const auto v = metric_in_name(path, metric)) {
      f.metric = recorded_metric{*v, "name"};
    } else {
      looked.push_back(fmt::format("no {}=VALUE in the name", metric));
      f.looked = fmt::format("{}", fmt::join(looked, "; "));
    }
  }
  return f;
}

// --- metric tables -------------------------------------------------------------------------------

namespace {

// The fields of one CSV line, one at a time, as views (a field in double quotes loses them; a quoted
// comma is not supported): a line's memory is the line's, whatever number of fields it holds.
class csv_line {
 public:
  explicit csv_line(std::string_view line) : rest_(line) {}
  // The next field, or nullopt after the last.
  std::optional<std::string_view> next() {
    if (done_) return std::nullopt;
    const size_t comma = rest_.find(',');
    std::string_view field = rest_.substr(0, comma);
    if (comma == std::string_view::npos)
      done_ = true;
    else
      rest_.remove_prefix(comma + 1);
    if (field.size() >= 2 && field.front() == '"' && field.back() == '"') field = field.substr(1, field.size() - 2);
    return field;
  }

 private:
  std::string_view rest_;
  bool done_ = false;
};

// A step as a table writes it: digits (exact, up to int64's largest), or a number that is a whole
// number a double holds exactly (at most 2^53: "500.0", as pandas writes an int column with gaps).
std::optional<int64_t> step_text(std::string_view text) {
  if (!text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos) return digits_value(text);
  const auto d = parse_decimal(std::string(text));
  if (!d || !(*d >= 0 && *d <= kMaxExactStep) || *d != std::floor(*d)) return std::nullopt;
  return static_cast<int64_t>(*d);
}

void add_value(metric_table& t, const std::string& where, int64_t step, double v) {
  t.values[step] = finite_metric(where, t.metric, v);
}

// The columns of the header row: where `step` and the metric are, how many there are, the first
// names (for the message when one is missing).
struct csv_header {
  size_t columns = 0;
  std::optional<size_t> step, value;
  std::vector<std::string> first_names;
};

csv_header read_header(std::string_view line, const std::string& metric) {
  csv_header h;
  csv_line fields(line);
  while (const auto f = fields.next()) {
    if (*f == "step" && !h.step) h.step = h.columns;
    if (*f == metric && !h.value) h.value = h.columns;
    if (h.first_names.size() < kMaxListedItems) h.first_names.emplace_back(*f);
    ++h.columns;
  }
  return h;
}

// One row: its step and value fields; throws when it has more or fewer fields than the header.
void read_row(std::string_view line, const csv_header& h, metric_table& t, size_t number) {
  std::string_view step, value;
  size_t count = 0;
  csv_line fields(line);
  while (const auto f = fields.next()) {
    if (count == *h.step) step = *f;
    if (count == *h.value) value = *f;
    ++count;
  }
  const std::string where = fmt::format("{}: line {}", t.file, number);
  if (count != h.columns) throw input_error(fmt::format("{}: {} fields, the header has {}", where, count, h.columns));
  if (value.empty()) return;
  const auto s = step_text(step);
  if (!s) throw input_error(fmt::format("{}: step '{}' is not a non-negative integer", where, printable(step)));
  const auto v = parse_decimal(std::string(value));
  if (!v) throw input_error(fmt::format("{}: {} '{}' is not a number", where, t.metric, printable(value)));
  add_value(t, where, *s, *v);
}

// Line by line over the text (a line's '\r' before '\n' dropped), holding one line's fields at a time.
void read_csv_table(const std::string& text, metric_table& t) {
  const std::string_view all(text);
  std::optional<csv_header> header;
  size_t number = 0;
  for (size_t start = 0; start < all.size();) {
    const size_t stop = std::min(all.find('\n', start), all.size());
    std::string_view line = all.substr(start, stop - start);
    start = stop + 1;
    ++number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!header) {
      header = read_header(line, t.metric);
      if (!header->step || !header->value)
        throw input_error(fmt::format(
            "{}: the header row must name a 'step' column and a '{}' column; found {} "
            "column{}: {}",
            t.file, t.metric, header->columns, header->columns == 1 ? "" : "s", quoted_list(header->first_names)));
    } else if (!line.empty()) {
      read_row(line, *header, t, number);
    }
  }
  if (!header)
    throw input_error(fmt::format("{}: empty: expected a header row with 'step' and '{}'", t.file, t.metric));
}

void read_json_entries(const json& list, metric_table& t, const std::string& key) {
  for (size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    if (!e.is_object() || !e.contains(key)) continue;
    const std::string where = fmt::format("{}: entry {}", t.file, i);
    const auto step = e.contains("step") ? json_step(e["step"]) : std::nullopt;
    if (!step) throw input_error(fmt::format("{}: holds '{}' without a \"step\": a non-negative integer", where, key));
    if (!e[key].is_number()) throw input_error(fmt::format("{}: '{}' is not a number", where, key));
    add_value(t, where, *step, e[key].get<double>());
  }
}

// A trainer_state.json's log_history, under the keys Trainer reads the metric from.
void read_log_history(const json& history, metric_table& t) {
  for (const std::string& key : trainer_metric_keys(t.metric)) {
    read_json_entries(history, t, key);
    if (!t.values.empty()) return;
  }
}

void read_json_table(const std::string& text, metric_table& t) {
  const json j = parse_json_file(t.file, text);
  if (j.is_object() && j.contains("log_history") && j["log_history"].is_array())
    return read_log_history(j["log_history"], t);
  if (j.is_array()) return read_json_entries(j, t, t.metric);
  if (!j.is_object())
    throw input_error(
        fmt::format("{}: expected a trainer_state.json, a list of {{\"step\": S, \"{}\": V}} or an object "
                    "{{\"S\": V}}",
                    t.file, t.metric));
  for (const auto& item : j.items()) {
    const std::string where = fmt::format("{}: key \"{}\"", t.file, printable(item.key()));
    const auto step =
        item.key().find_first_not_of("0123456789") == std::string::npos ? step_text(item.key()) : std::nullopt;
    if (!step) throw input_error(fmt::format("{}: expected a step (a non-negative integer) as the key", where));
    if (!item.value().is_number()) throw input_error(fmt::format("{}: the value is not a number", where));
    add_value(t, where, *step, item.value().get<double>());
  }
}

}  // namespace

metric_table parse_metric_table(const std::string& text, const std::string& file, const std::string& metric) {
  metric_table t;
  t.file = file;
  t.metric = metric;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '['))
    read_json_table(text, t);
  else
    read_csv_table(text, t);
  if (t.values.empty()) throw input_error(fmt::format("{}: holds no value of '{}'", file, metric));
  return t;
}

metric_table read_metric_table(const std::string& file, const std::string& metric) {
  return parse_metric_table(read_text_file(file, kMaxMetricFileBytes, open_mode::streams_too), file, metric);
}

}  // namespace swavg
