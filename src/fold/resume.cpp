#include "fold/resume.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include "fold/layout.h"
#include "util/error.h"

namespace swavg {
namespace {

std::optional<fold_mode> mode_from_name(const std::string& s) {
  for (fold_mode m : {fold_mode::swa, fold_mode::ema, fold_mode::weighted})
    if (s == mode_name(m)) return m;
  return std::nullopt;
}

std::optional<warmup_kind> warmup_from_name(const std::string& s) {
  for (warmup_kind w : {warmup_kind::none, warmup_kind::torch_ema, warmup_kind::power})
    if (s == warmup_name(w)) return w;
  return std::nullopt;
}

}  // namespace

std::string to_json(const resume_record& r) {
  nlohmann::ordered_json j;
  j["version"] = r.version;
  j["mode"] = mode_name(r.mode);
  j["n"] = r.n;
  if (r.decay) j["decay"] = *r.decay;
  if (r.warmup) j["warmup"] = warmup_name(*r.warmup);
  if (!r.counts.empty()) {
    nlohmann::ordered_json counts = nlohmann::ordered_json::object();
    for (const auto& [name, n] : r.counts) counts[name] = n;
    j["counts"] = counts;
  }
  if (r.accumulate_differs) j["accumulate_differs"] = true;
  j["layout"] = layout_name(r.layout);
  j["inputs"] = r.inputs;
  return j.dump();
}

resume_record resume_record_from_json(const std::string& text, const std::string& source) {
  resume_record r;
  try {
    const nlohmann::ordered_json j = nlohmann::ordered_json::parse(text);
    if (!j.is_object()) throw input_error(fmt::format("{}: swavg metadata is not a JSON object", source));
    const std::string mode = j.value("mode", "");
    const auto m = mode_from_name(mode);
    if (!m)
      throw input_error(fmt::format("{}: swavg metadata has mode '{}', expected swa, ema or weighted", source, mode));
    r.version = j.value("version", 1);
    r.mode = *m;
    r.n = j.value("n", int64_t{0});
    if (j.contains("decay")) r.decay = j["decay"].get<double>();
    if (j.contains("warmup")) r.warmup = warmup_from_name(j["warmup"].get<std::string>());
    if (j.contains("counts"))
      for (const auto& [k, v] : j["counts"].items()) r.counts.emplace_back(k, v.get<int64_t>());
    r.accumulate_differs = j.value("accumulate_differs", false);
    r.layout = j.value("layout", "") == layout_name(output_layout::averaged_model) ? output_layout::averaged_model
                                                                                   : output_layout::state_dict;
    if (j.contains("inputs")) r.inputs = j["inputs"].get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    throw input_error(fmt::format("{}: swavg metadata is not valid: {}", source, e.what()));
  }
  return r;
}

int64_t resumed_average::count_of(const std::string& name) const {
  auto it = counts.find(name);
  return it == counts.end() ? record.n : it->second;
}

resumed_average open_resumed(state_dict sd, const fold_config& c) {
  resumed_average r;
  auto it = sd.metadata.find(kResumeKey);
  if (it == sd.metadata.end())
    throw usage_error(
        fmt::format("{}: --resume needs an output of swavg average/ema (it has no swavg metadata)", sd.path));
  r.record = resume_record_from_json(it->second, sd.path);
  const resume_record& rec = r.record;
  if (rec.mode != c.mode)
    throw usage_error(fmt::format("{}: was made in {} mode, cannot resume it in {} mode", sd.path, mode_name(rec.mode),
                                  mode_name(c.mode)));
  if (c.mode == fold_mode::ema && rec.decay && *rec.decay != c.decay)
    spdlog::warn("{}: was made with decay {}, resuming with decay {}", sd.path, decimal(*rec.decay), decimal(c.decay));
  if (rec.n < 1) throw input_error(fmt::format("{}: swavg metadata holds n = {}, expected >= 1", sd.path, rec.n));
  if (rec.accumulate_differs)
    spdlog::warn(
        "{}: its tensors were rounded from a wider accumulator; the resumed average continues from the "
        "rounded values (write it with --output-dtype equal to the accumulator for exact resumes)",
        sd.path);
  r.counts.insert(rec.counts.begin(), rec.counts.end());
  r.sd = std::move(sd);
  for (auto& t : r.sd.tensors) {
    if (rec.layout != output_layout::averaged_model) {
      r.tensors[t.name] = &t.view;
    } else if (auto name = model_name_in_averaged_layout(t.name)) {
      r.tensors[*name] = &t.view;
    }
  }
  return r;
}

}  // namespace swavg
