#include "fold/name_mismatch.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

namespace swavg {
namespace {

constexpr size_t kMaxCuts = 8;  // prefixes tried per name: "", "a.", "a.b.", ... (names from files: bounded)

// Where a prefix ending in '.' or '/' may end in `name`: 0 (no prefix) first.
std::vector<size_t> cut_points(const std::string& name) {
  std::vector<size_t> cuts = {0};
  for (size_t i = 0; i + 1 < name.size() && cuts.size() <= kMaxCuts; ++i)
    if (name[i] == '.' || name[i] == '/') cuts.push_back(i + 1);
  return cuts;
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.size() > p.size() && s.compare(0, p.size(), p) == 0;
}

// Every name of `only_a` is `pa` + x where `pb` + x is in `only_b` (one for one, as many), and
// --strip-prefix pa/pb would map exactly those: no other name loses a prefix it should keep.
bool prefixes_map(const std::vector<const std::string*>& only_a, const std::unordered_set<std::string>& only_b,
                  const std::string& pa, const std::string& pb) {
  if (only_a.size() != only_b.size()) return false;
  std::unordered_set<std::string> hit;
  for (const std::string* a : only_a) {
    if (!pa.empty() && !starts_with(*a, pa)) return false;
    const std::string rest = a->substr(pa.size());
    if ((!pa.empty() && starts_with(rest, pa)) || (!pb.empty() && starts_with(rest, pb))) return false;
    if (only_b.count(pb + rest) == 0 || !hit.insert(pb + rest).second) return false;
  }
  return true;
}

bool find_prefixes(const std::vector<const std::string*>& only_a, const std::vector<const std::string*>& only_b,
                   name_set_diagnosis& d) {
  if (only_a.empty() || only_b.empty()) return false;
  const std::unordered_set<std::string> b_set = [&] {
    std::unordered_set<std::string> s;
    for (const std::string* n : only_b) s.insert(*n);
    return s;
  }();
  const std::string& a0 = *only_a.front();
  const std::string& b0 = *only_b.front();
  for (size_t i : cut_points(a0))
    for (size_t j : cut_points(b0)) {
      if ((i == 0 && j == 0) || a0.compare(i, std::string::npos, b0, j, std::string::npos) != 0) continue;
      const std::string pa = a0.substr(0, i), pb = b0.substr(0, j);
      if (pa == pb || !prefixes_map(only_a, b_set, pa, pb)) continue;
      d.prefix_a = pa;
      d.prefix_b = pb;
      return true;
    }
  return false;
}

// A prefix as the shell reads it back unchanged.
std::string shell_word(const std::string& s) {
  const bool plain = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::string("._/:@%+=,-").find(c) != std::string::npos;
  });
  if (plain && s[0] != '-') return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace

name_set_diagnosis diagnose_name_sets(const std::vector<named_shape>& a, const std::vector<named_shape>& b) {
  name_set_diagnosis d;
  std::unordered_map<std::string, const named_shape*> in_b;
  for (const auto& t : b) in_b.emplace(t.name, &t);
  std::unordered_set<std::string> in_a;
  std::vector<const std::string*> only_a, only_b;
  for (const auto& t : a) {
    in_a.insert(t.name);
    const auto it = in_b.find(t.name);
    if (it == in_b.end()) {
      only_a.push_back(&t.name);
      continue;
    }
    ++d.common;
    if (it->second->shape != t.shape) ++d.other_shapes;
  }
  for (const auto& t : b)
    if (in_a.count(t.name) == 0) only_b.push_back(&t.name);
  d.only_a = only_a.size();
  d.only_b = only_b.size();
  if (only_a.empty() && only_b.empty()) {
    if (d.other_shapes > 0)
      d.verdict = 2 * d.other_shapes > d.common ? name_set_verdict::different_models : name_set_verdict::shapes_differ;
    return d;
  }
  if (find_prefixes(only_a, only_b, d)) {
    d.verdict = name_set_verdict::prefix;
    return d;
  }
  const size_t larger = std::max(a.size(), b.size());
  const bool few_in_common = 2 * d.common < larger;
  d.verdict = few_in_common || 2 * d.other_shapes > d.common ? name_set_verdict::different_models
                                                             : name_set_verdict::partial_overlap;
  return d;
}

std::string name_set_advice(const name_set_diagnosis& d, const std::string& a, const std::string& b,
                            bool allow_missing) {
  switch (d.verdict) {
    case name_set_verdict::same:
    case name_set_verdict::shapes_differ: return "";
    case name_set_verdict::prefix: {
      if (!d.prefix_a.empty() && !d.prefix_b.empty())
        return fmt::format(
            "{} and {} name the same tensors but for their prefixes ('{}' against '{}'): pass --strip-prefix {} "
            "--strip-prefix {}",
            a, b, d.prefix_a, d.prefix_b, shell_word(d.prefix_a), shell_word(d.prefix_b));
      const bool in_a = !d.prefix_a.empty();
      return fmt::format("the tensor names of {} are those of {} with the prefix '{}': pass --strip-prefix {}",
                         in_a ? a : b, in_a ? b : a, in_a ? d.prefix_a : d.prefix_b,
                         shell_word(in_a ? d.prefix_a : d.prefix_b));
    }
    case name_set_verdict::different_models:
      return fmt::format(
          "{} and {} look like different models ({} of their tensor names in common{}): check the inputs; no "
          "option makes them one model",
          a, b, d.common, d.other_shapes > 0 ? fmt::format(", {} of them with other shapes", d.other_shapes) : "");
    case name_set_verdict::partial_overlap:
      if (allow_missing) return "";
      return fmt::format("{}: pass --allow-missing to average each tensor over the checkpoints that have it",
                         d.only_a > 0 && d.only_b > 0
                             ? fmt::format("{} lacks {} of the tensors of {}, and {} lacks {} of those of {}", b,
                                           d.only_a, a, a, d.only_b, b)
                         : d.only_a > 0 ? fmt::format("{} lacks {} of the tensors of {}", b, d.only_a, a)
                                        : fmt::format("{} lacks {} of the tensors of {}", a, d.only_b, b));
  }
  return "";
}

}  // namespace swavg
