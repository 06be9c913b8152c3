#include "fold/resume.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cfloat>
#include <initializer_list>
#include <map>
#include <unordered_map>

#include "fold/layout.h"
#include "fold/phema.h"
#include "util/decimal.h"
#include "util/error.h"
#include "util/json_bytes.h"

namespace swavg {

namespace {

const char* avg_fn_kind_name(avg_fn_kind k) { return k == avg_fn_kind::multi_avg_fn ? "multi_avg_fn" : "avg_fn"; }

std::string describe(const std::optional<avg_fn_spec>& f) {
  return f ? fmt::format("{} {} (sha256 {})", avg_fn_option(f->kind), f->path, f->sha256) : "swavg's own average";
}

// A resumed average continues only with the function it was made with: same kind, same file bytes.
void check_same_function(const std::string& source, const std::optional<avg_fn_spec>& made,
                         const std::optional<avg_fn_spec>& now) {
  const bool same =
      made.has_value() == now.has_value() && (!made || (made->kind == now->kind && made->sha256 == now->sha256));
  if (!same)
    throw usage_error(
        fmt::format("{}: was made with {}, cannot resume it with {}", source, describe(made), describe(now)));
}

}  // namespace

std::string to_json(const resume_record& r) {
  nlohmann::ordered_json j;
  j["version"] = r.version;
  j["mode"] = mode_name(r.mode);
  j["n"] = r.n;
  if (r.decay) j["decay"] = *r.decay;
  if (r.warmup) j["warmup"] = warmup_name(*r.warmup);
  if (r.power_sigma_rel) j["power_sigma_rel"] = *r.power_sigma_rel;
  if (r.last_t) j["last_t"] = *r.last_t;
  if (!r.counts.empty()) {
    nlohmann::ordered_json counts = nlohmann::ordered_json::object();
    for (const auto& [name, n] : r.counts) counts[name] = n;
    j["counts"] = counts;
  }
  if (r.accumulate_differs) j["accumulate_differs"] = true;
  j["layout"] = layout_name(r.layout);
  j["inputs"] = r.inputs;
  if (r.avg_fn)
    j["avg_fn"] = {{"kind", avg_fn_kind_name(r.avg_fn->kind)}, {"path", r.avg_fn->path}, {"sha256", r.avg_fn->sha256}};
  if (!r.weights.empty()) j["weights"] = r.weights;
  if (!r.weights_recipe.empty()) j["weights_recipe"] = r.weights_recipe;
  if (!r.selection.is_null()) j["selection"] = r.selection;
  return json_dump(j);
}

namespace {

using json = nlohmann::ordered_json;

// Reads the fields of one record, each checked for its type and range; every failure names the
// file, the field, what is accepted and what was found.
class record_reader {
 public:
  record_reader(const json& j, const std::string& source) : j_(j), source_(source) {}

  bool has(const char* field) const { return j_.contains(field); }

  [[noreturn]] void fail(const std::string& field, const std::string& expected, const json& found) const {
    throw input_error(fmt::format("{}: swavg metadata: field '{}': expected {}, found {}", source_, field, expected,
                                  json_dump(found)));
  }

  const json& required(const char* field) const {
    if (!j_.contains(field))
      throw input_error(fmt::format("{}: swavg metadata: field '{}' is missing", source_, field));
    return j_.at(field);
  }

  int64_t integer(const std::string& field, const json& v, int64_t lo, int64_t hi) const {
    const std::string expected = fmt::format("an integer in [{}, {}]", lo, hi);
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) fail(field, expected, v);
      const int64_t i = static_cast<int64_t>(u);
      if (i < lo) fail(field, expected, v);
      return i;
    }
    if (!v.is_number_integer()) fail(field, expected, v);
    const int64_t i = v.get<int64_t>();
    if (i < lo || i > hi) fail(field, expected, v);
    return i;
  }

  double real(const std::string& field, const json& v, double lo, double hi) const {
    const std::string expected = fmt::format("a number in [{}, {}]", decimal(lo), decimal(hi));
    if (!v.is_number()) fail(field, expected, v);
    const double d = v.get<double>();
    if (!(d >= lo && d <= hi)) fail(field, expected, v);
    return d;
  }

  template <typename E>
  E name(const std::string& field, const json& v, std::initializer_list<E> values, const char* (*name_of)(E)) const {
    std::vector<std::string> names;
    for (E e : values) {
      if (v.is_string() && v.get<std::string>() == name_of(e)) return e;
      names.push_back(fmt::format("\"{}\"", name_of(e)));
    }
    fail(field, fmt::format("one of {}", fmt::join(names, ", ")), v);
  }

  bool boolean(const std::string& field, const json& v) const {
    if (!v.is_boolean()) fail(field, "true or false", v);
    return v.get<bool>();
  }

  std::vector<double> reals(const std::string& field, const json& v, double lo, double hi) const {
    if (!v.is_array()) fail(field, "a list of numbers", v);
    std::vector<double> out;
    for (size_t i = 0; i < v.size(); ++i) out.push_back(real(fmt::format("{}[{}]", field, i), v[i], lo, hi));
    return out;
  }

  std::string text(const std::string& field, const json& v) const {
    if (!v.is_string()) fail(field, "a string", v);
    return v.get<std::string>();
  }

  std::vector<std::string> strings(const std::string& field, const json& v) const {
    if (!v.is_array()) fail(field, "a list of strings", v);
    std::vector<std::string> out;
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) fail(fmt::format("{}[{}]", field, i), "a string", v[i]);
      out.push_back(v[i].get<std::string>());
    }
    return out;
  }

  avg_fn_spec function(const std::string& field, const json& v) const {
    if (!v.is_object() || !v.contains("kind") || !v.contains("path") || !v.contains("sha256"))
      fail(field, "an object {\"kind\", \"path\", \"sha256\"}", v);
    avg_fn_spec s;
    s.kind = name(field + ".kind", v["kind"], {avg_fn_kind::avg_fn, avg_fn_kind::multi_avg_fn}, avg_fn_kind_name);
    const std::string hex = "0123456789abcdef";
    if (!v["path"].is_string()) fail(field + ".path", "a string", v["path"]);
    const json& digest = v["sha256"];
    if (!digest.is_string() || digest.get<std::string>().size() != 64 ||
        digest.get<std::string>().find_first_not_of(hex) != std::string::npos)
      fail(field + ".sha256", "64 lower-case hex digits", digest);
    s.path = v["path"].get<std::string>();
    s.sha256 = digest.get<std::string>();
    return s;
  }

 private:
  const json& j_;
  const std::string& source_;
};

}  // namespace

resume_record resume_record_from_json(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json_parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw input_error(fmt::format("{}: swavg metadata is not valid JSON: {}", source, e.what()));
  }
  if (!j.is_object()) throw input_error(fmt::format("{}: swavg metadata is not a JSON object", source));
  const record_reader f(j, source);
  resume_record r;
  r.version = static_cast<int>(f.integer("version", f.required("version"), kResumeVersion, kResumeVersion));
  r.mode = f.name("mode", f.required("mode"), {fold_mode::swa, fold_mode::ema, fold_mode::weighted}, mode_name);
  r.n = f.integer("n", f.required("n"), 1, kMaxResumeCount);
  if (f.has("decay")) r.decay = f.real("decay", j["decay"], 0.0, 1.0);
  if (f.has("warmup"))
    r.warmup =
        f.name("warmup", j["warmup"], {warmup_kind::none, warmup_kind::torch_ema, warmup_kind::power}, warmup_name);
  if (f.has("power_sigma_rel") || f.has("last_t")) {
    r.power_sigma_rel = f.real("power_sigma_rel", f.required("power_sigma_rel"), DBL_MIN, kMaxSigmaRel);
    r.last_t = f.real("last_t", f.required("last_t"), DBL_MIN, DBL_MAX);
  }
  if (f.has("counts")) {
    const json& counts = j["counts"];
    if (!counts.is_object()) f.fail("counts", "an object {name: count}", counts);
    for (const auto& [name, v] : counts.items())
      r.counts.emplace_back(name, f.integer(fmt::format("counts.{}", name), v, 1, r.n));
  }
  if (f.has("accumulate_differs")) r.accumulate_differs = f.boolean("accumulate_differs", j["accumulate_differs"]);
  if (f.has("layout"))
    r.layout = f.name("layout", j["layout"], {output_layout::state_dict, output_layout::averaged_model}, layout_name);
  if (f.has("inputs")) r.inputs = f.strings("inputs", j["inputs"]);
  if (f.has("avg_fn")) r.avg_fn = f.function("avg_fn", j["avg_fn"]);
  if (f.has("weights")) r.weights = f.reals("weights", j["weights"], 0.0, 1.0);
  if (f.has("weights_recipe")) r.weights_recipe = f.text("weights_recipe", j["weights_recipe"]);
  if (f.has("selection")) {
    if (!j["selection"].is_object()) f.fail("selection", "an object", j["selection"]);
    r.selection = j["selection"];
  }
  return r;
}

namespace {

// The first field in which a shard's record `b` differs from the others' `a`, as "field B (the
// others: A)"; nullopt when they describe the same average (the inputs' paths may differ: workers
// on other machines).
std::optional<std::string> record_difference(const resume_record& a, const resume_record& b) {
  const auto text = [](const auto& v) { return fmt::format("{}", v); };
  const auto optional_text = [](const auto& v) { return v ? fmt::format("{}", *v) : std::string("none"); };
  const auto differ = [](const char* field, const std::string& x, const std::string& y) {
    return x == y ? std::nullopt : std::optional<std::string>(fmt::format("{} {} (the others: {})", field, y, x));
  };
  const auto counts_text = [](const resume_record& r) {
    std::vector<std::string> items;
    for (const auto& [name, n] : r.counts) items.push_back(fmt::format("{}={}", name, n));
    return fmt::format("{{{}}}", fmt::join(items, ", "));
  };
  const auto warmup_text = [](const std::optional<warmup_kind>& w) {
    return w ? std::string(warmup_name(*w)) : std::string("none");
  };
  for (auto d : {differ("mode", mode_name(a.mode), mode_name(b.mode)), differ("n", text(a.n), text(b.n)),
                 differ("decay", optional_text(a.decay), optional_text(b.decay)),
                 differ("warmup", warmup_text(a.warmup), warmup_text(b.warmup)),
                 differ("power_sigma_rel", optional_text(a.power_sigma_rel), optional_text(b.power_sigma_rel)),
                 differ("last_t", optional_text(a.last_t), optional_text(b.last_t)),
                 differ("counts", counts_text(a), counts_text(b)),
                 differ("accumulate_differs", text(a.accumulate_differs), text(b.accumulate_differs)),
                 differ("layout", layout_name(a.layout), layout_name(b.layout)),
                 differ("avg_fn", describe(a.avg_fn), describe(b.avg_fn))})
    if (d) return d;
  return std::nullopt;
}

// A resumed folder is one average: every shard carries the same record. The record most shards
// carry (the earliest of equally many) is the reference; every other shard is named.
void check_shard_records(const state_dict& sd) {
  const size_t n = sd.shard_metadata.size();
  if (n < 2) return;
  std::vector<std::optional<resume_record>> records;
  std::unordered_map<std::string, std::vector<size_t>> groups;  // the record without its inputs -> shards
  std::vector<std::string> keys;
  for (const auto& [file, metadata] : sd.shard_metadata) {
    const auto it = metadata.find(kResumeKey);
    records.push_back(it == metadata.end() ? std::nullopt
                                           : std::optional<resume_record>(resume_record_from_json(it->second, file)));
    std::string key;
    if (records.back()) {
      resume_record same = *records.back();
      same.inputs.clear();
      key = to_json(same);
    }
    groups[key].push_back(keys.size());
    keys.push_back(std::move(key));
  }
  if (groups.size() == 1) return;
  size_t reference = 0;
  for (size_t s = 1; s < n; ++s)
    if (groups[keys[s]].size() > groups[keys[reference]].size()) reference = s;
  const std::optional<resume_record>& ref = records[reference];
  std::vector<std::string> differing;
  for (size_t s = 0; s < n; ++s) {
    if (keys[s] == keys[reference]) continue;
    const std::string& file = sd.shard_metadata[s].first;
    if (!ref || !records[s])
      differing.push_back(fmt::format("{}: {} resume record (the others: {})", file, records[s] ? "has a" : "has no",
                                      ref ? "have one" : "none"));
    else if (auto d = record_difference(*ref, *records[s]))
      differing.push_back(fmt::format("{}: {}", file, *d));
  }
  throw input_error(fmt::format(
      "{}: its shards carry different resume records, so they are not one average ({} of {} shards agree, as {}):\n  "
      "{}",
      sd.path, groups[keys[reference]].size(), n, sd.shard_metadata[reference].first, fmt::join(differing, "\n  ")));
}

}  // namespace

int64_t resumed_average::count_of(const std::string& name) const {
  auto it = counts.find(name);
  return it == counts.end() ? record.n : it->second;
}

const tensor_view* resumed_average::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : tensors[it->second].second;
}

resumed_average open_resumed(state_dict sd, const fold_config& c) {
  resumed_average r;
  check_shard_records(sd);
  auto it = sd.metadata.find(kResumeKey);
  if (it == sd.metadata.end())
    throw usage_error(
        fmt::format("{}: --resume needs an output of swavg average/ema (it has no swavg metadata)", sd.path));
  r.record = resume_record_from_json(it->second, sd.path);
  const resume_record& rec = r.record;
  if (rec.mode != c.mode)
    throw usage_error(fmt::format("{}: was made in {} mode, cannot resume it in {} mode", sd.path, mode_name(rec.mode),
                                  mode_name(c.mode)));
  check_same_function(sd.path, rec.avg_fn, c.avg_fn);
  const auto power_text = [](const char* what, bool set, double sigma) {
    return set ? fmt::format("{} --power-sigma-rel {}", what, sigma) : fmt::format("{} --power-sigma-rel", "without");
  };
  const bool power_now = c.power_ema.has_value();
  const bool power_then = rec.power_sigma_rel.has_value();
  if (c.mode == fold_mode::ema &&
      (power_now != power_then || (power_now && *rec.power_sigma_rel != c.power_ema->sigma_rel)))
    throw usage_error(fmt::format("{}: was made {}, cannot resume it {}", sd.path,
                                  power_text("with", power_then, power_then ? *rec.power_sigma_rel : 0.0),
                                  power_text("with", power_now, power_now ? c.power_ema->sigma_rel : 0.0)));
  if (c.mode == fold_mode::ema && !c.power_ema && rec.decay && *rec.decay != c.decay)
    spdlog::warn("{}: was made with decay {}, resuming with decay {}", sd.path, decimal(*rec.decay), decimal(c.decay));
  if (rec.accumulate_differs)
    spdlog::warn(
        "{}: its tensors were rounded from a wider accumulator; the resumed average continues from the "
        "rounded values (write it with --output-dtype equal to the accumulator for exact resumes)",
        sd.path);
  r.counts.insert(rec.counts.begin(), rec.counts.end());
  r.sd = std::move(sd);
  if (rec.layout == output_layout::averaged_model)
    for (auto& e : r.sd.objects)
      if (auto name = model_name_in_averaged_layout(e.name)) rename_entry(e, std::move(*name));
  r.tensors.reserve(r.sd.tensors.size());
  for (auto& t : r.sd.tensors) {
    std::optional<std::string> name = t.name;
    if (rec.layout == output_layout::averaged_model) name = model_name_in_averaged_layout(t.name);
    if (!name) continue;
    if (!r.index_.emplace(*name, r.tensors.size()).second)
      throw input_error(fmt::format("{}: tensor '{}' appears twice in the resumed average", r.sd.path, *name));
    r.tensors.emplace_back(std::move(*name), &t.view);
  }
  return r;
}

}  // namespace swavg
