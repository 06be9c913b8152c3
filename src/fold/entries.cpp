#include "fold/entries.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <unordered_map>

namespace swavg {
namespace {

// A key's identity among the entries: its text, told apart from a non-string key of equal text.
std::string identity(const object_entry& e) { return (e.string_key ? "s" : "k") + e.name; }

void add_view(std::string& sig, const char* who, size_t input, const tensor_view& v) {
  sig += fmt::format("{}{}:{}@{}/{};", who, input, v.storage_key, v.offset, fmt::join(v.strides, ","));
}

}  // namespace

std::vector<carried_entry> plan_carried(const std::vector<state_dict>& inputs, const state_dict* resume) {
  std::vector<carried_entry> out;
  std::unordered_map<std::string, size_t> index;
  auto take = [&](const state_dict& sd) {
    for (const auto& e : sd.objects) {
      auto [it, added] = index.emplace(identity(e), out.size());
      if (added)
        out.push_back(carried_entry{e, sd.path});
      else
        out[it->second] = carried_entry{e, sd.path};
    }
  };
  if (resume) take(*resume);
  for (const auto& sd : inputs) take(sd);
  return out;
}

std::vector<std::optional<size_t>> find_ties(const fold_plan& plan) {
  std::vector<std::optional<size_t>> ties(plan.tensors.size());
  std::unordered_map<std::string, size_t> first;
  std::string sig;
  for (size_t k = 0; k < plan.tensors.size(); ++k) {
    const tensor_plan& p = plan.tensors[k];
    const tensor_outcome& o = p.outcome;
    if (o.action == tensor_action::drop || p.sources.empty()) continue;
    sig.clear();
    bool keyed = true;
    for (const auto& s : p.sources) {
      keyed &= !s.view->storage_key.empty();
      add_view(sig, "i", s.input, *s.view);
    }
    if (p.resumed) {
      keyed &= !p.resumed->storage_key.empty();
      add_view(sig, "r", 0, *p.resumed);
    }
    if (!keyed) continue;
    sig += fmt::format("|{}|{}|{}|{}|{}|{}|{}", fmt::join(p.sources.front().view->shape, ","), action_name(o.action),
                       dtype_name(o.accumulate_type), dtype_name(o.output_type), o.count, p.resumed_count,
                       p.rule_decay ? fmt::format("{}", *p.rule_decay) : "-");
    auto [it, added] = first.emplace(sig, k);
    if (!added) ties[k] = it->second;
  }
  return ties;
}

}  // namespace swavg
