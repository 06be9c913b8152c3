// The fold planner: which tensor gets which action and dtypes, every disagreement listed, a resumed
// average joined by name, its time linear in the tensor count, and AveragedModel's layout names (the
// resume record itself: test_resume.cpp; run_fold end to end: test_execute.cpp).
#include <ctime>
#include <catch2/catch.hpp>
#include <functional>

#include "fold/execute.h"
#include "fold/layout.h"
#include "fold/plan.h"
#include "fold/resume.h"
#include "fold_support.h"
#include "util/error.h"

using namespace swavg;
using namespace swavg::test;

TEST_CASE("plan: AveragedModel's defaults (use_buffers=False)", "[plan][unit]") {
  const auto inputs = three_inputs();
  const fold_plan plan = plan_fold(fold_config{}, inputs, nullptr);
  REQUIRE(plan.tensors.size() == kModel.size());
  CHECK(plan.n == 3);
  for (size_t i = 0; i < kModel.size(); ++i) CHECK(plan.tensors[i].name == kModel[i].name);  // first-seen order
  for (const auto& p : plan.tensors) {
    REQUIRE(p.sources.size() == 3);
    CHECK(p.sources[2].input == 2);
    CHECK(p.sources[2].view == &inputs[2].tensors[static_cast<size_t>(&p - plan.tensors.data())].view);
  }
  struct want {
    const char* name;
    tensor_action action;
    const char* reason;
    bool buffer;
    dtype accumulate;
  };
  const std::vector<want> wants = {
      {"conv.weight", tensor_action::average, "default", false, dtype::float32},
      {"bn.weight", tensor_action::average, "default", false, dtype::float32},
      {"bn.running_mean", tensor_action::latest, "buffer", true, dtype::float32},
      {"bn.num_batches_tracked", tensor_action::latest, "int", true, dtype::int64},
      {"step", tensor_action::latest, "int", false, dtype::int32},
      {"emb.weight", tensor_action::average, "default", false, dtype::float32},  // bfloat16 accumulates in float32
  };
  for (const auto& w : wants) {
    INFO(w.name);
    const tensor_outcome& o = outcome(plan, w.name);
    CHECK(o.action == w.action);
    CHECK(std::string(reason_name(o.reason)) == w.reason);
    CHECK(o.buffer == w.buffer);
    CHECK(o.accumulate_type == w.accumulate);
    CHECK(o.output_type == o.input_type);
    CHECK(o.count == 3);
  }
}

TEST_CASE("plan: options change the decisions", "[plan][unit]") {
  const auto inputs = three_inputs();
  struct variant {
    const char* what;
    std::function<void(fold_config&)> configure;
    kind_table model_kinds;
    const char* name;
    tensor_action action;
    const char* reason;
    dtype accumulate;
    dtype output;
  };
  const auto rule = [](const char* pattern, tensor_action a) {
    return tensor_rule{pattern, compile_pattern(pattern, "test"), a, std::nullopt};
  };
  const std::vector<variant> variants = {
      {"--buffers average",
       [](fold_config& c) { c.buffers = buffer_policy::average; },
       {},
       "bn.running_mean",
       tensor_action::average,
       "buffer",
       dtype::float32,
       dtype::float32},
      {"--buffers average takes integer buffers too (AveragedModel(use_buffers=True))",
       [](fold_config& c) { c.buffers = buffer_policy::average; },
       {},
       "bn.num_batches_tracked",
       tensor_action::average,
       "buffer",
       dtype::int64,
       dtype::int64},
      {"--buffers average leaves integers that are not buffers to --int",
       [](fold_config& c) { c.buffers = buffer_policy::average; },
       {},
       "step",
       tensor_action::latest,
       "int",
       dtype::int32,
       dtype::int32},
      {"--buffers first",
       [](fold_config& c) { c.buffers = buffer_policy::first; },
       {},
       "bn.running_mean",
       tensor_action::first,
       "buffer",
       dtype::float32,
       dtype::float32},
      {"--buffers first takes integer buffers first, whatever --int says",
       [](fold_config& c) {
         c.buffers = buffer_policy::first;
         c.ints = int_policy::latest;
       },
       {},
       "bn.num_batches_tracked",
       tensor_action::first,
       "buffer",
       dtype::int64,
       dtype::int64},
      {"--buffers first leaves parameters alone",
       [](fold_config& c) { c.buffers = buffer_policy::first; },
       {},
       "bn.weight",
       tensor_action::average,
       "default",
       dtype::float32,
       dtype::float32},
      {"--int first with --buffers latest still decides integer buffers",
       [](fold_config& c) { c.ints = int_policy::first; },
       {},
       "bn.num_batches_tracked",
       tensor_action::first,
       "int",
       dtype::int64,
       dtype::int64},
      {"--int first",
       [](fold_config& c) { c.ints = int_policy::first; },
       {},
       "step",
       tensor_action::first,
       "int",
       dtype::int32,
       dtype::int32},
      {"a rule drops",
       [&](fold_config& c) { c.rules.push_back(rule("^conv\\.", tensor_action::drop)); },
       {},
       "conv.weight",
       tensor_action::drop,
       "rule",
       dtype::float32,
       dtype::float32},
      {"a rule asking to average an integer tensor is obeyed",
       [&](fold_config& c) { c.rules.push_back(rule("step", tensor_action::average)); },
       {},
       "step",
       tensor_action::average,
       "rule",
       dtype::int32,
       dtype::int32},
      {"a rule beats --buffers first",
       [&](fold_config& c) {
         c.buffers = buffer_policy::first;
         c.rules.push_back(rule("num_batches", tensor_action::latest));
       },
       {},
       "bn.num_batches_tracked",
       tensor_action::latest,
       "rule",
       dtype::int64,
       dtype::int64},
      {"--buffer REGEX",
       [](fold_config& c) { c.buffer_patterns.push_back("^bn\\.weight$"); },
       {},
       "bn.weight",
       tensor_action::latest,
       "buffer",
       dtype::float32,
       dtype::float32},
      {"--model says parameter",
       [](fold_config&) {},
       {{"bn.running_mean", tensor_kind::parameter}},
       "bn.running_mean",
       tensor_action::average,
       "default",
       dtype::float32,
       dtype::float32},
      {"--model says buffer",
       [](fold_config&) {},
       {{"conv.weight", tensor_kind::buffer}},
       "conv.weight",
       tensor_action::latest,
       "buffer",
       dtype::float32,
       dtype::float32},
      {"--accumulate native",
       [](fold_config& c) { c.accumulate = accumulate_policy::native; },
       {},
       "emb.weight",
       tensor_action::average,
       "default",
       dtype::bfloat16,
       dtype::bfloat16},
      {"--accumulate float64",
       [](fold_config& c) { c.accumulate = accumulate_policy::float64; },
       {},
       "conv.weight",
       tensor_action::average,
       "default",
       dtype::float64,
       dtype::float32},
      {"--output-dtype float16",
       [](fold_config& c) { c.output_dtype = dtype::float16; },
       {},
       "emb.weight",
       tensor_action::average,
       "default",
       dtype::float32,
       dtype::float16},
      {"--output-dtype leaves integers alone",
       [](fold_config& c) { c.output_dtype = dtype::float16; },
       {},
       "step",
       tensor_action::latest,
       "int",
       dtype::int32,
       dtype::int32},
  };
  for (const auto& v : variants) {
    INFO(v.what);
    fold_config c;
    v.configure(c);
    const tensor_outcome& o = outcome(plan_fold(c, inputs, nullptr, v.model_kinds), v.name);
    CHECK(o.action == v.action);
    CHECK(std::string(reason_name(o.reason)) == v.reason);
    CHECK(o.accumulate_type == v.accumulate);
    CHECK(o.output_type == v.output);
  }
}

TEST_CASE("plan: the inputs' own parameter/buffer split (TorchScript) decides before names", "[plan][unit]") {
  const std::vector<spec> specs = {{"scale", dtype::float32, {2}, tensor_kind::buffer},
                                   {"running_mean", dtype::float32, {2}, tensor_kind::parameter}};
  const auto inputs = three_inputs(specs);
  const fold_plan plan = plan_fold(fold_config{}, inputs, nullptr);
  CHECK(outcome(plan, "scale").action == tensor_action::latest);
  CHECK(outcome(plan, "running_mean").action == tensor_action::average);
  const fold_plan overridden = plan_fold(fold_config{}, inputs, nullptr, {{"scale", tensor_kind::parameter}});
  CHECK(outcome(overridden, "scale").action == tensor_action::average);
}

TEST_CASE("plan: every disagreement is listed, naming the files", "[plan][unit]") {
  struct bad_case {
    const char* what;
    std::vector<spec> b;  // the second input; the others are kModel
    bool allow_missing;
    std::vector<std::string> expected;
  };
  auto with = [](std::function<void(std::vector<spec>&)> change) {
    std::vector<spec> s = kModel;
    change(s);
    return s;
  };
  const std::vector<bad_case> cases = {
      {"shape",
       with([](auto& s) {
         s[0].shape = {2, 4};
       }),
       false,
       {"b.pt: tensor 'conv.weight': expected shape [4, 2] (as in a.pt) but found [2, 4]"}},
      {"dtype",
       with([](auto& s) { s[1].type = dtype::float64; }),
       false,
       {"b.pt: tensor 'bn.weight': expected dtype float32 (as in a.pt) but found float64"}},
      {"missing",
       with([](auto& s) { s.erase(s.begin() + 4); }),
       false,
       {"b.pt: tensor 'step' is missing (present in a.pt)", "--allow-missing"}},
      {"extra",
       with([](auto& s) { s.push_back({"extra.bias"}); }),
       false,
       {"a.pt: tensor 'extra.bias' is missing (present in b.pt)", "c.pt: tensor 'extra.bias' is missing",
        "(2 differences)"}},
      {"shape and dtype at once",
       with([](auto& s) {
         s[5] = {"emb.weight", dtype::float16, {2, 3}};
       }),
       false,
       {"expected shape [3, 2]", "expected dtype bfloat16", "(2 differences)"}},
      {"--allow-missing still checks shapes",
       with([](auto& s) {
         s.erase(s.begin());
         s[0].shape = {3};
       }),
       true,
       {"b.pt: tensor 'bn.weight': expected shape [2] (as in a.pt) but found [3]", "(1 difference)"}},
  };
  for (const auto& k : cases) {
    INFO(k.what);
    fold_config c;
    c.allow_missing = k.allow_missing;
    const std::vector<state_dict> inputs = {make_sd("a.pt", kModel), make_sd("b.pt", k.b), make_sd("c.pt", kModel)};
    try {
      plan_fold(c, inputs, nullptr);
      FAIL("no mismatch_error");
    } catch (const mismatch_error& e) {
      for (const auto& s : k.expected) CHECK_THAT(e.what(), Catch::Contains(s));
      if (k.allow_missing) CHECK_THAT(e.what(), !Catch::Contains("--allow-missing"));
    }
  }
}

TEST_CASE("plan: --allow-missing averages each tensor over the inputs that have it", "[plan][unit]") {
  std::vector<spec> fewer = kModel;
  fewer.erase(fewer.begin());
  fold_config c;
  c.allow_missing = true;
  const std::vector<state_dict> inputs = {make_sd("a.pt", fewer), make_sd("b.pt", kModel), make_sd("c.pt", kModel)};
  const fold_plan plan = plan_fold(c, inputs, nullptr);
  CHECK(plan.tensors.front().name == "bn.weight");  // first seen in a.pt
  CHECK(outcome(plan, "conv.weight").count == 2);
  CHECK(outcome(plan, "bn.weight").count == 3);
  const resume_record r = make_resume_record(c, plan, fold_inputs{inputs, std::nullopt, {}});
  CHECK(r.n == 3);
  const std::vector<std::pair<std::string, int64_t>> counts = {{"conv.weight", 2}};
  CHECK(r.counts == counts);
}

TEST_CASE("plan: a resumed average's record lists its checkpoints, then the run's", "[plan][resume][unit]") {
  const auto inputs = three_inputs();
  resume_record rec;
  rec.mode = fold_mode::swa;
  rec.n = 2;
  rec.inputs = {"run/ckpt_1.pt", "run/ckpt_2.pt"};
  state_dict earlier = make_sd("avg.pt", kModel);
  earlier.metadata[kResumeKey] = to_json(rec);
  fold_inputs in{inputs, open_resumed(std::move(earlier), fold_config{}), {}};
  const fold_plan plan = plan_fold(fold_config{}, in.checkpoints, &*in.resume);
  const resume_record r = make_resume_record(fold_config{}, plan, in);
  CHECK(r.n == 5);
  std::vector<std::string> expected = rec.inputs;
  for (const auto& sd : inputs) expected.push_back(sd.path);
  CHECK(r.inputs == expected);  // as one run over all five would record them, never "avg.pt"
}

TEST_CASE("plan: a resumed average joins each tensor with its count", "[plan][resume][unit]") {
  const auto inputs = three_inputs();
  resume_record rec;
  rec.mode = fold_mode::swa;
  rec.n = 4;
  rec.counts = {{"bn.weight", 2}};
  state_dict earlier = make_sd("avg.pt", kModel);
  earlier.metadata[kResumeKey] = to_json(rec);
  const resumed_average resumed = open_resumed(std::move(earlier), fold_config{});
  const fold_plan plan = plan_fold(fold_config{}, inputs, &resumed);
  CHECK(plan.n == 7);
  CHECK(outcome(plan, "conv.weight").count == 7);
  CHECK(outcome(plan, "bn.weight").count == 5);
  for (const auto& p : plan.tensors) CHECK(p.resumed == resumed.find(p.name));
  CHECK(resumed.find("no.such") == nullptr);

  state_dict wrong_shape = make_sd("avg.pt", {{"conv.weight", dtype::float32, {8}}});
  wrong_shape.metadata[kResumeKey] = to_json(rec);
  const resumed_average bad = open_resumed(std::move(wrong_shape), fold_config{});
  CHECK_THROWS_WITH(plan_fold(fold_config{}, inputs, &bad),
                    Catch::Contains("avg.pt: tensor 'conv.weight': expected shape [4, 2] (as in a.pt) but found [8]"));
}

TEST_CASE("plan: up to 20 differences are listed, more are cut with '... (N in all)'", "[plan][unit]") {
  for (const size_t count : {size_t{20}, size_t{21}}) {
    INFO(count);
    std::vector<spec> a, b;
    for (size_t i = 0; i < count; ++i) {
      a.push_back({"t" + std::to_string(i), dtype::float32, {2}});
      b.push_back({"t" + std::to_string(i), dtype::float32, {3}});
    }
    try {
      plan_fold(fold_config{}, {make_sd("a.pt", a), make_sd("b.pt", b)}, nullptr);
      FAIL("no mismatch_error");
    } catch (const mismatch_error& e) {
      const std::string what = e.what();
      CHECK_THAT(what, Catch::Contains("(" + std::to_string(count) + " differences)"));
      CHECK_THAT(what, Catch::Contains("tensor 't19'"));
      CHECK_THAT(what, !Catch::Contains("tensor 't20'"));
      CHECK((what.find("\n  ... (21 in all)") != std::string::npos) == (count > 20));
      // Every shape differs: two different models, and no --allow-missing offered.
      CHECK_THAT(what, Catch::Contains("a.pt and b.pt look like different models"));
      CHECK_THAT(what, !Catch::Contains("--allow-missing"));
    }
  }
}

TEST_CASE("layout: averaged-model names in and out", "[layout][unit]") {
  std::vector<named_tensor> tensors =
      make_sd("x", {{"module.a"}, {"module.b.c"}, {kNAveraged, dtype::int64, {}}}).tensors;
  std::optional<named_tensor> n;
  REQUIRE(from_averaged_layout(tensors, n));
  CHECK(n->name == kNAveraged);
  REQUIRE(tensors.size() == 2);
  CHECK(tensors[1].name == "b.c");
  to_averaged_layout(tensors, *n);
  CHECK(tensors[0].name == "module.a");
  CHECK(tensors[2].name == kNAveraged);
  std::vector<named_tensor> plain = make_sd("x", {{"module.a"}, {"b"}, {kNAveraged, dtype::int64, {}}}).tensors;
  CHECK_FALSE(from_averaged_layout(plain, n));
  CHECK(plain[0].name == "module.a");
  CHECK(model_name_in_averaged_layout("module.fc.weight") == "fc.weight");
  CHECK_FALSE(model_name_in_averaged_layout(kNAveraged));
}

TEST_CASE("plan: linear in the tensor count (3 inputs of 100,000 tensors)", "[plan][scale][unit]") {
  constexpr size_t kTensors = 100000;
  std::vector<spec> specs;
  specs.reserve(kTensors);
  for (size_t i = 0; i < kTensors; ++i) {
    const std::string block = "blocks." + std::to_string(i / 4) + ".";
    switch (i % 4) {
      case 0: specs.push_back({block + "weight", dtype::float32, {2}}); break;
      case 1: specs.push_back({block + "bn.running_mean", dtype::float32, {2}}); break;
      case 2: specs.push_back({block + "bn.num_batches_tracked", dtype::int64, {}}); break;
      default: specs.push_back({block + "head.bias", dtype::bfloat16, {2}}); break;
    }
  }
  const auto inputs = three_inputs(specs);
  resume_record rec;
  rec.n = 2;
  state_dict earlier = make_sd("avg.pt", specs);
  earlier.metadata[kResumeKey] = to_json(rec);
  fold_config c;
  c.rules = parse_rules(
      R"([{"match": "head\\.bias$", "action": "first"}, {"match": "^blocks\\.7\\.", "action": "drop"}])", "r.json");
  c.buffer_patterns = {"\\.weight_scale$"};
  c.allow_missing = true;

  const std::clock_t start = std::clock();
  const resumed_average resumed = open_resumed(std::move(earlier), c);
  const fold_plan plan = plan_fold(c, inputs, &resumed);
  const double cpu_s = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;

  REQUIRE(plan.tensors.size() == kTensors);
  CHECK(plan.n == 5);
  CHECK(plan.tensors[3].outcome.action == tensor_action::first);
  CHECK(plan.tensors[28].outcome.action == tensor_action::drop);
  CHECK(plan.tensors[1].outcome.action == tensor_action::latest);
  CHECK(plan.tensors.back().sources.size() == 3);
  CHECK(plan.tensors.back().resumed != nullptr);
  INFO("planned 3 x " << kTensors << " tensors (and a resumed average) in " << cpu_s << " s of CPU time");
  CHECK(cpu_s < 1.0);  // about 0.2 s on the project's machine; a quadratic step would take minutes
}

TEST_CASE("plan: the resumed average is checked as one more input (extra, missing, dtype, shape)",
          "[plan][resume][unit]") {
  resume_record rec;
  rec.n = 2;
  auto open = [&](std::vector<spec> specs) {
    state_dict sd = make_sd("avg.pt", specs);
    sd.metadata[kResumeKey] = to_json(rec);
    return open_resumed(std::move(sd), fold_config{});
  };
  auto with = [](std::function<void(std::vector<spec>&)> change) {
    std::vector<spec> s = kModel;
    change(s);
    return s;
  };
  struct bad_case {
    const char* what;
    std::vector<spec> resumed;
    std::vector<std::string> expected;
  };
  const std::vector<bad_case> cases = {
      {"an input's extra tensor",
       with([](auto& s) { s.erase(s.begin() + 1); }),
       {"avg.pt: tensor 'bn.weight' is missing (present in a.pt)", "(1 difference)", "--allow-missing"}},
      {"a tensor of the average in no input",
       with([](auto& s) { s.push_back({"extra.bias"}); }),
       {"a.pt: tensor 'extra.bias' is missing (present in avg.pt)", "c.pt: tensor 'extra.bias' is missing",
        "(3 differences)", "--allow-missing"}},
      {"another dtype",
       with([](auto& s) { s[1].type = dtype::float16; }),
       {"avg.pt: tensor 'bn.weight': expected dtype float32 (as in a.pt) but found float16", "(1 difference)"}},
      {"another shape",
       with([](auto& s) { s[1].shape = {3}; }),
       {"avg.pt: tensor 'bn.weight': expected shape [2] (as in a.pt) but found [3]", "(1 difference)"}},
      {"an integer tensor's dtype",
       with([](auto& s) { s[4].type = dtype::int64; }),
       {"avg.pt: tensor 'step': expected dtype int32 (as in a.pt) but found int64"}},
  };
  const auto inputs = three_inputs();
  for (const auto& k : cases) {
    INFO(k.what);
    const resumed_average resumed = open(k.resumed);
    try {
      plan_fold(fold_config{}, inputs, &resumed);
      FAIL("no mismatch_error");
    } catch (const mismatch_error& e) {
      for (const auto& s : k.expected) CHECK_THAT(e.what(), Catch::Contains(s));
    }
  }

  SECTION("--allow-missing: tensors on one side only are no difference; dtypes and shapes still are") {
    fold_config c;
    c.allow_missing = true;
    const resumed_average fewer = open(with([](auto& s) { s.erase(s.begin() + 1); }));
    const fold_plan plan = plan_fold(c, inputs, &fewer);
    CHECK(outcome(plan, "bn.weight").count == 3);
    CHECK(outcome(plan, "conv.weight").count == 5);
    // A tensor only the average holds is kept, with its count, where the average has it.
    const resumed_average more = open(with([](auto& s) {
      s.insert(s.begin() + 1, {"only.bias", dtype::float16, {5}});
    }));
    const fold_plan kept = plan_fold(c, inputs, &more);
    REQUIRE(kept.tensors.size() == kModel.size() + 1);
    CHECK(kept.tensors[0].name == "conv.weight");
    const tensor_plan& only = kept.tensors[1];
    CHECK(only.name == "only.bias");
    CHECK(only.sources.empty());
    CHECK(only.resumed == more.find("only.bias"));
    CHECK(only.outcome.count == 2);
    CHECK(only.outcome.input_type == dtype::float16);
    CHECK(shape_of(only) == std::vector<int64_t>{5});
    CHECK(kept.tensors[2].name == "bn.weight");
    CHECK_THROWS_WITH(plan_fold(fold_config{}, inputs, &more),
                      Catch::Contains("a.pt: tensor 'only.bias' is missing (present in avg.pt)"));
    const resumed_average other = open(with([](auto& s) {
      s.erase(s.begin() + 2);
      s[1].type = dtype::float64;
    }));
    CHECK_THROWS_WITH(plan_fold(c, inputs, &other),
                      Catch::Contains("avg.pt: tensor 'bn.weight': expected dtype float32 (as in a.pt) but found "
                                      "float64") &&
                          Catch::Contains("(1 difference)"));
  }

  SECTION("the dtype expected is the one this run writes: --output-dtype for floating tensors") {
    fold_config c;
    c.output_dtype = dtype::bfloat16;
    const resumed_average written = open(with([](auto& s) { s[0].type = s[1].type = s[2].type = dtype::bfloat16; }));
    CHECK(plan_fold(c, inputs, &written).n == 5);
    const resumed_average plain = open(kModel);
    CHECK_THROWS_WITH(plan_fold(c, inputs, &plain),
                      Catch::Contains("avg.pt: tensor 'conv.weight': expected dtype bfloat16 (--output-dtype, for "
                                      "float32 in a.pt) but found float32"));
    CHECK_THROWS_WITH(plan_fold(fold_config{}, inputs, &written),
                      Catch::Contains("avg.pt: tensor 'conv.weight': expected dtype float32 (as in a.pt) but found "
                                      "bfloat16"));
  }

  SECTION("a tensor a rule drops is in no output, so not missing from the resumed average") {
    fold_config c;
    c.rules = parse_rules(R"([{"match": "^bn\\.weight$", "action": "drop"}])", "rules.json");
    const resumed_average fewer = open(with([](auto& s) { s.erase(s.begin() + 1); }));
    CHECK(plan_fold(c, inputs, &fewer).n == 5);
  }
}

TEST_CASE("plan: the new dtypes: unsigned as integers, 8-bit floats in float32, packed ones only whole",
          "[plan][unit]") {
  const std::vector<spec> specs = {{"w8", dtype::float8_e4m3fn},
                                   {"scale", dtype::float8_e8m0fnu},
                                   {"count", dtype::uint32, {}},
                                   {"q", dtype::float4_e2m1fn_x2, {3}}};
  const auto inputs = three_inputs(specs);
  fold_config c;
  c.rules = parse_rules(R"([{"match": "^q$", "action": "first"}])", "test");
  const fold_plan plan = plan_fold(c, inputs, nullptr);
  CHECK(outcome(plan, "w8").action == tensor_action::average);
  CHECK(outcome(plan, "w8").accumulate_type == dtype::float32);
  CHECK(outcome(plan, "w8").output_type == dtype::float8_e4m3fn);
  CHECK(outcome(plan, "scale").accumulate_type == dtype::float32);
  CHECK(outcome(plan, "count").action == tensor_action::latest);
  CHECK(outcome(plan, "count").reason == outcome_reason::ints);
  CHECK(outcome(plan, "q").action == tensor_action::first);

  c.accumulate = accumulate_policy::float64;
  CHECK(outcome(plan_fold(c, inputs, nullptr), "w8").accumulate_type == dtype::float64);
  c.accumulate = accumulate_policy::native;
  CHECK_THROWS_WITH(plan_fold(c, inputs, nullptr),
                    Catch::Contains("tensor 'w8' is float8_e4m3fn, in which PyTorch has no arithmetic") &&
                        Catch::Contains("--accumulate float32 (the default) or float64"));
  c.accumulate = accumulate_policy::automatic;
  c.output_dtype = dtype::float32;  // 8-bit inputs written wider
  CHECK(outcome(plan_fold(c, inputs, nullptr), "w8").output_type == dtype::float32);
  c.output_dtype.reset();

  // The packed tensor with no rule: --int is for integers, whichever way it points.
  fold_config plain;
  for (int_policy ints : {int_policy::latest, int_policy::first}) {
    plain.ints = ints;
    CHECK_THROWS_AS(plan_fold(plain, inputs, nullptr), usage_error);
    CHECK_THROWS_WITH(plan_fold(plain, inputs, nullptr),
                      Catch::Contains("tensor 'q' is float4_e2m1fn_x2 (two 4-bit floats packed in each byte") &&
                          Catch::Contains(R"({"match": "q$", "action": "latest"})"));
  }
  fold_config averaged;
  averaged.rules = parse_rules(R"([{"match": "^q$", "action": "average"}])", "test");
  CHECK_THROWS_WITH(plan_fold(averaged, inputs, nullptr), Catch::Contains("as the rule '^q$' asks"));
  // Unsigned integers averaged as the signed ones: SWA and EMA yes, weighted no.
  averaged.rules =
      parse_rules(R"([{"match": "^q$", "action": "drop"}, {"match": "^count$", "action": "average"}])", "test");
  CHECK(outcome(plan_fold(averaged, inputs, nullptr), "count").action == tensor_action::average);
  averaged.mode = fold_mode::weighted;
  averaged.weights = {1, 1, 1};
  CHECK_THROWS_WITH(plan_fold(averaged, inputs, nullptr), Catch::Contains("integer tensor 'count'"));
}
