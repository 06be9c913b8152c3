/*
 * Why two checkpoints' tensor names disagree, and the fix: the same names under another prefix
 * (a `.pt` of `model.x` against a `.safetensors` of `x`: --strip-prefix model.), different models
 * (few names in common, or the common ones of other shapes: no option helps), or a partial overlap
 * (some tensors missing from one: --allow-missing averages each over the checkpoints that have it).
 * A pure function of the two name-and-shape lists, linear in their length.
 */
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace swavg {

struct named_shape {
  std::string name;
  std::vector<int64_t> shape;
};

enum class name_set_verdict {
  same,              // the same names and shapes
  prefix,            // the same names under another prefix: strip_prefixes fixes it
  different_models,  // under half the names in common, or most common ones of other shapes
  partial_overlap,   // most names in common, some missing from one side
  shapes_differ,     // the same names, a few of other shapes
};

struct name_set_diagnosis {
  name_set_verdict verdict = name_set_verdict::same;
  std::string prefix_a, prefix_b;  // with `prefix`: what each side's names start with (one may be "")
  size_t common = 0, only_a = 0, only_b = 0, other_shapes = 0;
};

name_set_diagnosis diagnose_name_sets(const std::vector<named_shape>& a, const std::vector<named_shape>& b);

// The sentence that says what to do about `d` between files `a` and `b` ("" for `same` and
// `shapes_differ`); `allow_missing`: --allow-missing was given, so not suggested.
std::string name_set_advice(const name_set_diagnosis& d, const std::string& a, const std::string& b,
                            bool allow_missing);

}  // namespace swavg
