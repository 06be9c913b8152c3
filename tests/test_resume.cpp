// The resume record (fold/resume.h): what one run writes the next reads back, and every record that
// cannot be continued (no record, another mode or averaging function, a field of the wrong type or
// out of range, at its edges) refused with the file and the field named.
#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fold/config.h"
#include "fold/resume.h"
#include "fold_support.h"
#include "util/error.h"

using namespace swavg;
using namespace swavg::test;

TEST_CASE("resume record: what one run writes the next reads back", "[resume][unit]") {
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
  CHECK(text == R"({"version":1,"mode":"ema","n":12,"decay":0.999,"warmup":"power","counts":{"b":3,"a":2},)"
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

TEST_CASE("resume record: what cannot be resumed is refused", "[resume][unit]") {
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

TEST_CASE("resume record: an average made with --avg-fn resumes only with the same function", "[resume][unit]") {
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
      {"other bytes", avg_fn_spec{avg_fn_kind::avg_fn, "f.ts", digest}, avg_fn_spec{avg_fn_kind::avg_fn, "f.ts", other},
       "cannot resume it with --avg-fn f.ts (sha256 bbbb"},
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

TEST_CASE("resume record: every field is type- and range-checked, at its edges", "[resume][unit]") {
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

TEST_CASE("resume record: n = 1 is the smallest average that can be continued", "[resume][unit]") {
  state_dict sd = make_sd("avg.pt", kModel);
  sd.metadata[kResumeKey] = R"({"version": 1, "mode": "swa", "n": 1})";
  const resumed_average r = open_resumed(std::move(sd), fold_config{});
  CHECK(r.record.n == 1);
  CHECK(r.count_of("conv.weight") == 1);
  CHECK(r.tensors.size() == kModel.size());
}

TEST_CASE("resume record: every shard of a resumed folder carries the same record", "[resume][unit]") {
  resume_record r;
  r.n = 4;
  r.inputs = {"a.pt", "b.pt"};
  const std::string same = to_json(r);
  resume_record moved = r;
  moved.inputs = {"/elsewhere/a.pt", "/elsewhere/b.pt"};  // a worker on another machine: one average
  auto folder = [](const std::vector<std::optional<std::string>>& records) {
    state_dict sd = make_sd("avg/", kModel);
    for (size_t s = 0; s < records.size(); ++s) {
      std::map<std::string, std::string> metadata{{"format", "pt"}};
      if (records[s]) metadata[kResumeKey] = *records[s];
      sd.shard_metadata.emplace_back("avg/model-0000" + std::to_string(s + 1) + ".safetensors", metadata);
    }
    sd.metadata = sd.shard_metadata.front().second;
    return sd;
  };
  CHECK(open_resumed(folder({same, same, to_json(moved)}), fold_config{}).record.n == 4);

  resume_record three = r;
  three.n = 3;
  resume_record ema = r;
  ema.mode = fold_mode::ema;
  resume_record counted = r;
  counted.counts = {{"bn.weight", 3}};
  struct bad_case {
    const char* what;
    std::vector<std::optional<std::string>> records;
    std::vector<std::string> expected;
  };
  const std::vector<bad_case> cases = {
      {"n",
       {same, to_json(three), same, to_json(three)},
       {"avg/: its shards carry different resume records", "(2 of 4 shards agree, as avg/model-00001.safetensors)",
        "avg/model-00002.safetensors: n 3 (the others: 4)", "avg/model-00004.safetensors: n 3"}},
      {"mode", {same, to_json(ema)}, {"avg/model-00002.safetensors: mode ema (the others: swa)"}},
      {"counts", {same, to_json(counted)}, {"avg/model-00002.safetensors: counts {bn.weight=3} (the others: {})"}},
      {"a shard without a record",
       {same, same, std::nullopt},
       {"avg/model-00003.safetensors: has no resume record (the others: have one)"}},
      {"the first without a record",
       {std::nullopt, same},
       {"avg/model-00002.safetensors: has a resume record (the others: none)"}},
  };
  for (const auto& k : cases) {
    INFO(k.what);
    try {
      open_resumed(folder(k.records), fold_config{});
      FAIL("no error");
    } catch (const error& e) {
      CHECK(e.code() == exit_code::bad_input);
      for (const auto& s : k.expected) CHECK_THAT(e.what(), Catch::Contains(s));
      CHECK_THAT(e.what(), !Catch::Contains("avg/model-00001.safetensors:"));
    }
  }
  // A broken record in a later shard names that shard.
  CHECK_THROWS_WITH(open_resumed(folder({same, "{"}), fold_config{}),
                    Catch::StartsWith("avg/model-00002.safetensors: swavg metadata is not valid JSON"));
}
