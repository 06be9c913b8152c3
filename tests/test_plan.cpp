// The fold planner (which tensor gets which action and dtypes, every disagreement listed), the
// resume record, and the native fold end to end against PyTorch's own averages of a training run.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <catch2/catch.hpp>
#include <map>
#include <memory>

#include "fold/execute.h"
#include "fold/layout.h"
#include "fold/native_kernels.h"
#include "fold/plan.h"
#include "fold/resume.h"
#include "formats/load.h"
#include "support.h"
#include "util/error.h"

using namespace swavg;
using swavg::test::fixture;

namespace {

struct spec {
  std::string name;
  dtype type = dtype::float32;
  std::vector<int64_t> shape = {2};
  tensor_kind kind = tensor_kind::unknown;
};

// A state dict of zero-filled tensors held in memory (planning reads no bytes).
state_dict make_sd(const std::string& path, const std::vector<spec>& specs) {
  state_dict sd;
  sd.path = path;
  for (const auto& s : specs) {
    tensor_view v;
    v.type = s.type;
    v.shape = s.shape;
    v.strides = contiguous_strides(s.shape);
    auto bytes = std::make_shared<std::vector<uint8_t>>(v.nbytes() + 8, 0);
    v.storage = bytes->data();
    v.storage_bytes = v.nbytes();
    v.storage_key = s.name;
    v.owner = bytes;
    sd.tensors.push_back(named_tensor{s.name, v, s.kind});
  }
  return sd;
}

const tensor_outcome& outcome(const fold_plan& plan, const std::string& name) {
  for (const auto& p : plan.tensors)
    if (p.name == name) return p.outcome;
  FAIL("no plan for " << name);
  throw std::logic_error("unreachable");
}

const std::vector<spec> kModel = {
    {"conv.weight", dtype::float32, {4, 2}},
    {"bn.weight"},
    {"bn.running_mean"},
    {"bn.num_batches_tracked", dtype::int64, {}},
    {"step", dtype::int32, {}},
    {"emb.weight", dtype::bfloat16, {3, 2}},
};

std::vector<state_dict> three_inputs(const std::vector<spec>& specs = kModel) {
  return {make_sd("a.pt", specs), make_sd("b.pt", specs), make_sd("c.pt", specs)};
}

std::string scratch(const std::string& name) {
  const std::string dir = std::string(SWAVG_FIXTURES_DIR) + "/scratch";
  ::mkdir(dir.c_str(), 0755);
  return dir + "/" + name;
}

}  // namespace

TEST_CASE("plan: AveragedModel's defaults (use_buffers=False)", "[plan]") {
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
    CHECK(o.reason == w.reason);
    CHECK(o.buffer == w.buffer);
    CHECK(o.accumulate_type == w.accumulate);
    CHECK(o.output_type == o.input_type);
    CHECK(o.count == 3);
  }
}

TEST_CASE("plan: options change the decisions", "[plan]") {
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
      {"--buffers average", [](fold_config& c) { c.buffers = buffer_policy::average; }, {}, "bn.running_mean",
       tensor_action::average, "buffer", dtype::float32, dtype::float32},
      {"--buffers average takes integer buffers too (AveragedModel(use_buffers=True))",
       [](fold_config& c) { c.buffers = buffer_policy::average; }, {}, "bn.num_batches_tracked", tensor_action::average,
       "buffer", dtype::int64, dtype::int64},
      {"--buffers average leaves integers that are not buffers to --int",
       [](fold_config& c) { c.buffers = buffer_policy::average; }, {}, "step", tensor_action::latest, "int",
       dtype::int32, dtype::int32},
      {"--buffers first", [](fold_config& c) { c.buffers = buffer_policy::first; }, {}, "bn.running_mean",
       tensor_action::first, "buffer", dtype::float32, dtype::float32},
      {"--buffers first takes integer buffers first, whatever --int says",
       [](fold_config& c) {
         c.buffers = buffer_policy::first;
         c.ints = int_policy::latest;
       },
       {}, "bn.num_batches_tracked", tensor_action::first, "buffer", dtype::int64, dtype::int64},
      {"--buffers first leaves parameters alone", [](fold_config& c) { c.buffers = buffer_policy::first; }, {},
       "bn.weight", tensor_action::average, "default", dtype::float32, dtype::float32},
      {"--int first with --buffers latest still decides integer buffers",
       [](fold_config& c) { c.ints = int_policy::first; }, {}, "bn.num_batches_tracked", tensor_action::first, "int",
       dtype::int64, dtype::int64},
      {"--int first", [](fold_config& c) { c.ints = int_policy::first; }, {}, "step", tensor_action::first, "int",
       dtype::int32, dtype::int32},
      {"a rule drops", [&](fold_config& c) { c.rules.push_back(rule("^conv\\.", tensor_action::drop)); }, {},
       "conv.weight", tensor_action::drop, "rule", dtype::float32, dtype::float32},
      {"a rule asking to average an integer tensor is obeyed",
       [&](fold_config& c) { c.rules.push_back(rule("step", tensor_action::average)); }, {}, "step",
       tensor_action::average, "rule", dtype::int32, dtype::int32},
      {"a rule beats --buffers first", [&](fold_config& c) {
         c.buffers = buffer_policy::first;
         c.rules.push_back(rule("num_batches", tensor_action::latest));
       },
       {}, "bn.num_batches_tracked", tensor_action::latest, "rule", dtype::int64, dtype::int64},
      {"--buffer REGEX", [](fold_config& c) { c.buffer_patterns.push_back("^bn\\.weight$"); }, {}, "bn.weight",
       tensor_action::latest, "buffer", dtype::float32, dtype::float32},
      {"--model says parameter", [](fold_config&) {}, {{"bn.running_mean", tensor_kind::parameter}},
       "bn.running_mean", tensor_action::average, "default", dtype::float32, dtype::float32},
      {"--model says buffer", [](fold_config&) {}, {{"conv.weight", tensor_kind::buffer}}, "conv.weight",
       tensor_action::latest, "buffer", dtype::float32, dtype::float32},
      {"--accumulate native", [](fold_config& c) { c.accumulate = accumulate_policy::native; }, {}, "emb.weight",
       tensor_action::average, "default", dtype::bfloat16, dtype::bfloat16},
      {"--accumulate float64", [](fold_config& c) { c.accumulate = accumulate_policy::float64; }, {}, "conv.weight",
       tensor_action::average, "default", dtype::float64, dtype::float32},
      {"--output-dtype float16", [](fold_config& c) { c.output_dtype = dtype::float16; }, {}, "emb.weight",
       tensor_action::average, "default", dtype::float32, dtype::float16},
      {"--output-dtype leaves integers alone", [](fold_config& c) { c.output_dtype = dtype::float16; }, {}, "step",
       tensor_action::latest, "int", dtype::int32, dtype::int32},
  };
  for (const auto& v : variants) {
    INFO(v.what);
    fold_config c;
    v.configure(c);
    const tensor_outcome& o = outcome(plan_fold(c, inputs, nullptr, v.model_kinds), v.name);
    CHECK(o.action == v.action);
    CHECK(o.reason == v.reason);
    CHECK(o.accumulate_type == v.accumulate);
    CHECK(o.output_type == v.output);
  }
}

TEST_CASE("plan: the inputs' own parameter/buffer split (TorchScript) decides before names", "[plan]") {
  const std::vector<spec> specs = {{"scale", dtype::float32, {2}, tensor_kind::buffer},
                                   {"running_mean", dtype::float32, {2}, tensor_kind::parameter}};
  const auto inputs = three_inputs(specs);
  const fold_plan plan = plan_fold(fold_config{}, inputs, nullptr);
  CHECK(outcome(plan, "scale").action == tensor_action::latest);
  CHECK(outcome(plan, "running_mean").action == tensor_action::average);
  const fold_plan overridden = plan_fold(fold_config{}, inputs, nullptr, {{"scale", tensor_kind::parameter}});
  CHECK(outcome(overridden, "scale").action == tensor_action::average);
}

TEST_CASE("plan: every disagreement is listed, naming the files", "[plan]") {
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
      {"shape", with([](auto& s) { s[0].shape = {2, 4}; }), false,
       {"b.pt: tensor 'conv.weight': expected shape [4, 2] (as in a.pt) but found [2, 4]"}},
      {"dtype", with([](auto& s) { s[1].type = dtype::float64; }), false,
       {"b.pt: tensor 'bn.weight': expected dtype float32 (as in a.pt) but found float64"}},
      {"missing", with([](auto& s) { s.erase(s.begin() + 4); }), false,
       {"b.pt: tensor 'step' is missing (present in a.pt)", "--allow-missing"}},
      {"extra", with([](auto& s) { s.push_back({"extra.bias"}); }), false,
       {"a.pt: tensor 'extra.bias' is missing (present in b.pt)", "c.pt: tensor 'extra.bias' is missing",
        "(2 differences)"}},
      {"shape and dtype at once", with([](auto& s) { s[5] = {"emb.weight", dtype::float16, {2, 3}}; }), false,
       {"expected shape [3, 2]", "expected dtype bfloat16", "(2 differences)"}},
      {"--allow-missing still checks shapes", with([](auto& s) {
         s.erase(s.begin());
         s[0].shape = {3};
       }),
       true, {"b.pt: tensor 'bn.weight': expected shape [2] (as in a.pt) but found [3]", "(1 differences)"}},
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

TEST_CASE("plan: --allow-missing averages each tensor over the inputs that have it", "[plan]") {
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

TEST_CASE("plan: a resumed average joins each tensor with its count", "[plan][resume]") {
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

TEST_CASE("resume record: what one run writes the next reads back", "[resume]") {
  resume_record r;
  r.mode = fold_mode::ema;
  r.n = 12;
  r.decay = 0.999;
  r.warmup = warmup_kind::power;
  r.counts = {{"b", 3}, {"a", 2}};
  r.accumulate_differs = true;
  r.layout = output_layout::averaged_model;
  r.inputs = {"ema.pt", "ckpt_12.pt"};
  const std::string text = to_json(r);
  CHECK(text ==
        R"({"version":1,"mode":"ema","n":12,"decay":0.999,"warmup":"power","counts":{"b":3,"a":2},)"
        R"("accumulate_differs":true,"layout":"averaged-model","inputs":["ema.pt","ckpt_12.pt"]})");
  const resume_record back = resume_record_from_json(text, "ema.pt");
  CHECK(back.mode == r.mode);
  CHECK(back.n == r.n);
  CHECK(back.decay == r.decay);
  CHECK(back.warmup == r.warmup);
  CHECK(back.counts == r.counts);
  CHECK(back.accumulate_differs);
  CHECK(back.layout == r.layout);
  CHECK(back.inputs == r.inputs);
}

TEST_CASE("resume record: what cannot be resumed is refused", "[resume]") {
  struct bad_case {
    const char* what;
    std::optional<std::string> record;  // nullopt: no swavg metadata at all
    fold_mode mode;
    exit_code code;
    const char* message;
  };
  const std::vector<bad_case> cases = {
      {"no record", std::nullopt, fold_mode::swa, exit_code::usage, "has no swavg metadata"},
      {"not JSON", "{", fold_mode::swa, exit_code::bad_input, "avg.pt: swavg metadata is not valid JSON"},
      {"not an object", "[1]", fold_mode::swa, exit_code::bad_input, "not a JSON object"},
      {"another mode", R"({"version": 1, "mode": "ema", "n": 2})", fold_mode::swa, exit_code::usage,
       "was made in ema mode, cannot resume it in swa mode"},
  };
  for (const auto& k : cases) {
    INFO(k.what);
    state_dict sd = make_sd("avg.pt", kModel);
    if (k.record) sd.metadata[kResumeKey] = *k.record;
    fold_config c;
    c.mode = k.mode;
    try {
      open_resumed(std::move(sd), c);
      FAIL("no error");
    } catch (const error& e) {
      CHECK(e.code() == k.code);
      CHECK_THAT(e.what(), Catch::Contains(k.message));
    }
  }
}

TEST_CASE("resume record: an average made with --avg-fn resumes only with the same function", "[resume]") {
  const std::string digest(64, 'a'), other(64, 'b');
  resume_record r;
  r.n = 3;
  r.avg_fn = avg_fn_spec{avg_fn_kind::avg_fn, "f.ts", digest};
  const std::string text = to_json(r);
  CHECK_THAT(text, Catch::Contains(R"("avg_fn":{"kind":"avg_fn","path":"f.ts","sha256":")" + digest + R"("})"));
  const resume_record back = resume_record_from_json(text, "avg.pt");
  REQUIRE(back.avg_fn);
  CHECK(back.avg_fn->kind == avg_fn_kind::avg_fn);
  CHECK(back.avg_fn->path == "f.ts");
  CHECK(back.avg_fn->sha256 == digest);

  struct resume_case {
    const char* what;
    std::optional<avg_fn_spec> made, now;
    const char* message;  // nullptr: resumes
  };
  const std::vector<resume_case> cases = {
      {"same bytes, other path", avg_fn_spec{avg_fn_kind::avg_fn, "f.ts", digest},
       avg_fn_spec{avg_fn_kind::avg_fn, "copy.ts", digest}, nullptr},
      {"other bytes", avg_fn_spec{avg_fn_kind::avg_fn, "f.ts", digest},
       avg_fn_spec{avg_fn_kind::avg_fn, "f.ts", other}, "cannot resume it with --avg-fn f.ts (sha256 bbbb"},
      {"other kind", avg_fn_spec{avg_fn_kind::avg_fn, "f.ts", digest},
       avg_fn_spec{avg_fn_kind::multi_avg_fn, "f.ts", digest}, "cannot resume it with --multi-avg-fn f.ts"},
      {"function dropped", avg_fn_spec{avg_fn_kind::avg_fn, "f.ts", digest}, std::nullopt,
       "was made with --avg-fn f.ts (sha256 aaaa"},
      {"function added", std::nullopt, avg_fn_spec{avg_fn_kind::avg_fn, "f.ts", digest},
       "was made with swavg's own average, cannot resume it with --avg-fn f.ts"},
  };
  for (const auto& k : cases) {
    INFO(k.what);
    resume_record made;
    made.n = 2;
    made.avg_fn = k.made;
    state_dict sd = make_sd("avg.pt", kModel);
    sd.metadata[kResumeKey] = to_json(made);
    fold_config c;
    c.avg_fn = k.now;
    if (k.message)
      CHECK_THROWS_WITH(open_resumed(std::move(sd), c), Catch::Contains(k.message));
    else
      CHECK_NOTHROW(open_resumed(std::move(sd), c));
  }

  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"("avg_fn": 1)", "field 'avg_fn': expected an object"},
      {R"("avg_fn": {"kind": "avg_fn", "path": "f.ts"})", "field 'avg_fn': expected an object"},
      {R"("avg_fn": {"kind": "lerp", "path": "f.ts", "sha256": ")" + digest + R"("})", "field 'avg_fn.kind'"},
      {R"("avg_fn": {"kind": "avg_fn", "path": 3, "sha256": ")" + digest + R"("})", "field 'avg_fn.path'"},
      {R"("avg_fn": {"kind": "avg_fn", "path": "f.ts", "sha256": ")" + digest.substr(1) + R"("})",
       "field 'avg_fn.sha256': expected 64 lower-case hex digits"},
      {R"("avg_fn": {"kind": "avg_fn", "path": "f.ts", "sha256": ")" + digest + R"(a"})", "field 'avg_fn.sha256'"},
      {R"("avg_fn": {"kind": "avg_fn", "path": "f.ts", "sha256": ")" + std::string(64, 'A') + R"("})",
       "field 'avg_fn.sha256'"},
  };
  for (const auto& [field, message] : bad) {
    INFO(field);
    CHECK_THROWS_WITH(resume_record_from_json(R"({"version": 1, "mode": "swa", "n": 2, )" + field + "}", "avg.pt"),
                      Catch::Contains(message));
  }
}

TEST_CASE("resume record: every field is type- and range-checked, at its edges", "[resume]") {
  // Each record is the minimal valid one with one field changed. An empty error: valid.
  const std::string base = R"("version": 1, "mode": "swa", "n": 4)";
  const std::string n_range = "field 'n': expected an integer in [1, 9007199254740992]";
  auto with = [&](const std::string& fields) { return "{" + base + (fields.empty() ? "" : ", " + fields) + "}"; };
  struct edge {
    std::string record;
    std::string error;
  };
  const std::vector<edge> edges = {
      {with(""), ""},
      {R"({"mode": "swa", "n": 4})", "avg.pt: swavg metadata: field 'version' is missing"},
      {R"({"version": 2, "mode": "swa", "n": 4})", "field 'version': expected an integer in [1, 1], found 2"},
      {R"({"version": "1", "mode": "swa", "n": 4})", "field 'version': expected an integer in [1, 1], found \"1\""},
      {R"({"version": 1, "n": 4})", "field 'mode' is missing"},
      {R"({"version": 1, "mode": "mean", "n": 4})",
       "field 'mode': expected one of \"swa\", \"ema\", \"weighted\", found \"mean\""},
      {R"({"version": 1, "mode": 3, "n": 4})", "field 'mode': expected one of"},
      {R"({"version": 1, "mode": "swa"})", "field 'n' is missing"},
      {R"({"version": 1, "mode": "swa", "n": 1})", ""},
      {R"({"version": 1, "mode": "swa", "n": 0})", n_range + ", found 0"},
      {R"({"version": 1, "mode": "swa", "n": -1})", n_range + ", found -1"},
      {R"({"version": 1, "mode": "swa", "n": 9007199254740992})", ""},
      {R"({"version": 1, "mode": "swa", "n": 9007199254740993})", n_range + ", found 9007199254740993"},
      {R"({"version": 1, "mode": "swa", "n": 18446744073709551615})", n_range + ", found 18446744073709551615"},
      {R"({"version": 1, "mode": "swa", "n": 2.5})", n_range + ", found 2.5"},
      {R"({"version": 1, "mode": "swa", "n": "3"})", n_range + ", found \"3\""},
      {R"({"version": 1, "mode": "swa", "n": true})", "field 'n': expected an integer"},
      {with(R"("decay": 0)"), ""},
      {with(R"("decay": 1)"), ""},
      {with(R"("decay": 1.0000000000000002)"), "field 'decay': expected a number in [0, 1], found 1.0000000000000002"},
      {with(R"("decay": -5e-324)"), "field 'decay': expected a number in [0, 1]"},
      {with(R"("decay": "0.9")"), "field 'decay': expected a number in [0, 1], found \"0.9\""},
      {with(R"("decay": 1e999)"), "is not valid JSON: [json.exception.out_of_range.406] number overflow"},
      {with(R"("warmup": "power")"), ""},
      {with(R"("warmup": "cosine")"), "field 'warmup': expected one of \"none\", \"torch_ema\", \"power\""},
      {with(R"("warmup": null)"), "field 'warmup'"},
      {with(R"("counts": {"conv.weight": 1, "bn.weight": 4})"), ""},
      {with(R"("counts": {"conv.weight": 0})"), "field 'counts.conv.weight': expected an integer in [1, 4], found 0"},
      {with(R"("counts": {"conv.weight": -2})"), "field 'counts.conv.weight': expected an integer in [1, 4], found -2"},
      {with(R"("counts": {"conv.weight": 5})"), "field 'counts.conv.weight': expected an integer in [1, 4], found 5"},
      {with(R"("counts": {"conv.weight": "2"})"), "field 'counts.conv.weight': expected an integer in [1, 4]"},
      {with(R"("counts": [2])"), "field 'counts': expected an object {name: count}, found [2]"},
      {with(R"("accumulate_differs": false)"), ""},
      {with(R"("accumulate_differs": 1)"), "field 'accumulate_differs': expected true or false, found 1"},
      {with(R"("layout": "averaged-model")"), ""},
      {with(R"("layout": "averaged_model")"),
       "field 'layout': expected one of \"state-dict\", \"averaged-model\", found \"averaged_model\""},
      {with(R"("inputs": ["a.pt", "b.pt"])"), ""},
      {with(R"("inputs": "a.pt")"), "field 'inputs': expected a list of strings"},
      {with(R"("inputs": ["a.pt", 2])"), "field 'inputs[1]': expected a string, found 2"},
  };
  for (const auto& e : edges) {
    INFO(e.record);
    state_dict sd = make_sd("avg.pt", kModel);
    sd.metadata[kResumeKey] = e.record;
    if (e.error.empty()) {
      CHECK_NOTHROW(open_resumed(std::move(sd), fold_config{}));
      continue;
    }
    try {
      open_resumed(std::move(sd), fold_config{});
      FAIL("no error");
    } catch (const error& err) {
      CHECK(err.code() == exit_code::bad_input);
      CHECK_THAT(err.what(), Catch::StartsWith("avg.pt: swavg metadata") && Catch::Contains(e.error));
    }
  }
}

TEST_CASE("resume record: n = 1 is the smallest average that can be continued", "[resume]") {
  state_dict sd = make_sd("avg.pt", kModel);
  sd.metadata[kResumeKey] = R"({"version": 1, "mode": "swa", "n": 1})";
  const resumed_average r = open_resumed(std::move(sd), fold_config{});
  CHECK(r.record.n == 1);
  CHECK(r.count_of("conv.weight") == 1);
  CHECK(r.tensors.size() == kModel.size());
}

TEST_CASE("plan: up to 100 differences are listed, more are cut with '...'", "[plan]") {
  for (const size_t count : {size_t{100}, size_t{101}}) {
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
      CHECK_THAT(what, Catch::Contains("tensor 't99'"));
      CHECK_THAT(what, !Catch::Contains("tensor 't100'"));
      CHECK((what.find("\n  ...") != std::string::npos) == (count > 100));
    }
  }
}

TEST_CASE("layout: averaged-model names in and out", "[layout]") {
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

TEST_CASE("run_fold: the native kernels give PyTorch's averages bit for bit", "[plan][fold]") {
  const state_dict reference = load_state_dict(fixture("runs/cnn/reference.pt"));
  std::map<std::string, const tensor_view*> want;
  for (const auto& t : reference.tensors) want[t.name] = &t.view;
  load_options load;
  load.key = "model";
  for (const fold_mode mode : {fold_mode::swa, fold_mode::ema}) {
    INFO(mode_name(mode));
    // Without LibTorch the lerp kernel is trusted only on CPUs where ATen takes the FMA path.
    if (mode == fold_mode::ema && !lerp_form_for(dtype::float32, dtype::float32)) continue;
    fold_inputs in;
    for (int i = 0; i < 6; ++i)
      in.checkpoints.push_back(load_state_dict(fixture("runs/cnn/ckpt_" + std::to_string(i) + ".pt"), load));
    fold_config c;
    c.mode = mode;
    c.decay = 0.9;
    const std::string out = scratch(std::string("plan_") + mode_name(mode) + ".pt");
    ::unlink(out.c_str());
    const fold_result result = run_fold(c, in, fold_target{out, output_format::torch});
    CHECK(result.n == 6);
    const state_dict got = load_state_dict(out);
    size_t compared = 0;
    for (const auto& t : got.tensors) {
      INFO(t.name);
      auto it = want.find(std::string(mode == fold_mode::swa ? "swa." : "ema.") + t.name);
      if (it == want.end()) {  // a buffer: the last checkpoint's (--buffers latest)
        const auto& last = in.checkpoints.back().tensors;
        const auto same =
            std::find_if(last.begin(), last.end(), [&](const named_tensor& x) { return x.name == t.name; });
        REQUIRE(same != last.end());
        CHECK(test::row_major_bytes(t.view) == test::row_major_bytes(same->view));
        continue;
      }
      CHECK(test::row_major_bytes(t.view) == test::row_major_bytes(*it->second));
      ++compared;
    }
    CHECK(compared == want.size() / 2);
    CHECK(got.metadata.count(kResumeKey) == 1);
  }
}

TEST_CASE("plan: linear in the tensor count (3 inputs of 100,000 tensors)", "[plan][scale]") {
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
