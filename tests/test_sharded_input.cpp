// Sharded inputs (formats/hf/sharded_input.h): index validation as data, folder resolution, the checks
// of shards against the weight map, and the order and provenance of the merged state dict.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/hf/sharded_input.h"
#include "formats/io/load.h"
#include "support.h"
#include "util/error.h"
#include "util/mapped_file.h"

using namespace swavg;
using namespace swavg::test;
using json = nlohmann::json;

namespace {

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// A safetensors file of float32 tensors, each {name: n} filled with `fill + i`.
void write_shard(const std::string& path, const std::vector<std::pair<std::string, int>>& tensors, float fill = 0,
                 const std::map<std::string, std::string>& metadata = {}) {
  json header = json::object();
  std::string data;
  for (const auto& [name, n] : tensors) {
    const uint64_t begin = data.size();
    for (int i = 0; i < n; ++i) {
      float v = fill + static_cast<float>(i);
      data.append(reinterpret_cast<const char*>(&v), sizeof v);
    }
    header[name] = {{"dtype", "F32"}, {"shape", {n}}, {"data_offsets", {begin, data.size()}}};
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  while (text.size() % 8) text += ' ';
  std::string bytes(8, '\0');
  const uint64_t n = text.size();
  std::memcpy(&bytes[0], &n, 8);
  write_file(path, bytes + text + data);
}

std::string index_with(const std::string& weight_map, const std::string& metadata = "{}") {
  return R"({"metadata": )" + metadata + R"(, "weight_map": )" + weight_map + "}";
}

}  // namespace

TEST_CASE("a valid index keeps the weight map in the file's order", "[sharded_input]") {
  const hf_index i =
      parse_hf_index("i.json", index_with(R"({"b": "s2", "a": "s1", "c": "s2"})", R"({"total_size": 24})"));
  REQUIRE(i.total_size == 24u);
  REQUIRE(i.weight_map.size() == 3);
  CHECK(i.weight_map[0] == std::make_pair(std::string("b"), std::string("s2")));
  CHECK(i.weight_map[1].first == "a");
  CHECK(shard_names(i) == std::vector<std::string>{"s2", "s1"});
  CHECK_FALSE(parse_hf_index("i.json", R"({"weight_map": {"a": "s"}})").total_size);
  CHECK_FALSE(
      parse_hf_index("i.json", R"({"metadata": {"format": "pt"}, "weight_map": {"a": "s"}, "x": [1]})").total_size);
  CHECK(parse_hf_index("i.json", index_with(R"({"a": "s"})", R"({"total_size": 18446744073709551615})")).total_size ==
        UINT64_MAX);
  CHECK(parse_hf_index("i.json", index_with(R"({"a": "s"})", R"({"total_size": 12.0})")).total_size == 12u);
  CHECK(parse_hf_index("i.json", index_with(R"({"a": "s"})", R"({"total_size": 0})")).total_size == 0u);
}

TEST_CASE("bad indexes are refused with what is wrong", "[sharded_input]") {
  struct bad {
    std::string text;
    std::string message;
  };
  const std::vector<bad> cases = {
      {"[]", "the index is an array, expected a JSON object"},
      {"{", "not valid JSON"},
      {"", "not valid JSON"},
      {R"({"metadata": {}})", "has no weight_map"},
      {R"({"weight_map": ["a"]})", "weight_map is an array"},
      {R"({"weight_map": "s"})", "weight_map is a string"},
      {R"({"weight_map": {}})", "lists no tensors"},
      {R"({"weight_map": {"a": 1}})", "tensor 'a' maps to number"},
      {R"({"weight_map": {"a": null}})", "tensor 'a' maps to null"},
      {R"({"weight_map": {"a": ["s"]}})", "tensor 'a' maps to an array"},
      {R"({"weight_map": {"a": {"s": "t"}}})", "tensor 'a' maps to an object"},
      {R"({"weight_map": {"weight_map": {"a": "s"}}})", "tensor 'weight_map' maps to an object"},
      {R"({"weight_map": {"weight_map": {}}})", "tensor 'weight_map' maps to an object"},
      {R"({"weight_map": {"a": "s", "a": "s"}})", "lists tensor 'a' twice"},
      {R"({"weight_map": {"a": "s"}, "weight_map": {"b": "s"}})", "duplicate key 'weight_map'"},
      {R"({"weight_map": {"": "s"}})", "empty tensor name"},
      {R"({"weight_map": {"a": ""}})", "an empty shard name"},
      {R"({"weight_map": {"a": "../x.safetensors"}})", "path separator"},
      {R"({"weight_map": {"a": "/etc/passwd"}})", "path separator"},
      {R"({"weight_map": {"a": "sub\\x"}})", "path separator"},
      {R"({"weight_map": {"a": ".."}})", "'..'"},
      {R"({"weight_map": {"a": "."}})", "the shard name '.'"},
      {R"({"weight_map": {"a": "model..safetensors"}})", "'..'"},
      {R"({"weight_map": {"a": "x\u0000y"}})", "NUL byte"},
      {index_with(R"({"a": "s"})", "[]"), "metadata is an array"},
      {index_with(R"({"a": "s"})", R"({"total_size": -1})"), "total_size is -1: negative"},
      {index_with(R"({"a": "s"})", R"({"total_size": 1.5})"), "not a whole number"},
      {index_with(R"({"a": "s"})", R"({"total_size": "12"})"), "a string"},
      {index_with(R"({"a": "s"})", R"({"total_size": 18446744073709551616})"), "larger than 2^64 - 1"},
      {index_with(R"({"a": "s"})", R"({"total_size": 1e400})"), "not valid JSON"},
      {std::string(R"({"weight_map": {"a": "s"}})") + std::string(1, '\0'), "NUL byte"},
      {"{\"weight_map\": {\"a\": \"\xff\"}}", "not valid UTF-8"},
  };
  for (const auto& c : cases) {
    INFO(c.text);
    exit_code code = exit_code::ok;
    const std::string message = error_of([&] { parse_hf_index("m.index.json", c.text); }, &code);
    CHECK(code == exit_code::bad_input);
    CHECK_THAT(message, Catch::Contains("m.index.json") && Catch::Contains(c.message));
  }
}

TEST_CASE("every problem of an index is in one message", "[sharded_input]") {
  const std::string message =
      error_of([] { parse_hf_index("m.index.json", R"({"weight_map": {"a": "x/y", "b": 3, "c": "..", "a": "s"}})"); });
  CHECK_THAT(message, Catch::Contains("4 problems") && Catch::Contains("'a'") && Catch::Contains("'b'") &&
                          Catch::Contains("'c'") && Catch::Contains("twice"));
}

TEST_CASE("the index's bounds: size, shard names, tensor names, nesting", "[sharded_input]") {
  const std::string small = R"({"weight_map": {"a": "s"}})";
  // Literal sizes: a limit moved by one byte must fail here, so not derived from kMaxIndexBytes.
  std::string at_limit = small + std::string(67108864 - small.size(), ' ');
  CHECK_NOTHROW(parse_hf_index("i", at_limit));
  at_limit += ' ';
  CHECK_THAT(error_of([&] { parse_hf_index("i", at_limit); }),
             Catch::Contains("index is 67108865 bytes, more than the limit of 67108864 bytes"));

  const std::string longest_shard(kMaxShardNameBytes, 's');
  CHECK_NOTHROW(parse_hf_index("i", R"({"weight_map": {"a": ")" + longest_shard + "\"}}"));
  CHECK_THAT(error_of([&] { parse_hf_index("i", R"({"weight_map": {"a": ")" + longest_shard + "s\"}}"); }),
             Catch::Contains("a shard name of 256 bytes"));

  const std::string longest_tensor(kMaxIndexTensorNameBytes, 't');
  CHECK_NOTHROW(parse_hf_index("i", R"({"weight_map": {")" + longest_tensor + R"(": "s"}})"));
  CHECK_THAT(error_of([&] { parse_hf_index("i", R"({"weight_map": {")" + longest_tensor + R"(t": "s"}})"); }),
             Catch::Contains("tensor name of 4097 bytes"));

  auto nested = [](int depth) {
    return R"({"weight_map": {"a": "s"}, "x": )" + std::string(depth - 1, '[') + std::string(depth - 1, ']') + "}";
  };
  CHECK_NOTHROW(parse_hf_index("i", nested(128)));
  CHECK_THAT(error_of([&] { parse_hf_index("i", nested(129)); }), Catch::Contains("deeper than 128"));
}

TEST_CASE("shards are merged in the weight map's shard order, each in its own order", "[sharded_input]") {
  temp_dir d;
  write_shard(d / "model-00001-of-00002.safetensors", {{"z", 2}, {"y", 3}}, 1, {{"swavg_resume", "r"}});
  write_shard(d / "model-00002-of-00002.safetensors", {{"b", 1}, {"a", 4}}, 100, {{"other", "o"}});
  write_file(d / kSafetensorsIndexName,
             index_with(R"({"b": "model-00002-of-00002.safetensors", "a": "model-00002-of-00002.safetensors",
                            "y": "model-00001-of-00002.safetensors", "z": "model-00001-of-00002.safetensors"})",
                        R"({"total_size": 40})"));
  for (const std::string& arg : {d.path(), d.path() + "/", d / kSafetensorsIndexName}) {
    INFO(arg);
    const state_dict sd = load_state_dict(arg);
    CHECK(sd.path == arg);
    CHECK(sd.format == file_format::safetensors);
    std::vector<std::string> names;
    for (const auto& t : sd.tensors) names.push_back(t.name);
    CHECK(names == std::vector<std::string>{"b", "a", "z", "y"});
    CHECK(sd.metadata == std::map<std::string, std::string>{{"other", "o"}});  // the first shard's
    CHECK(sd.tensors[0].view.mapping != sd.tensors[2].view.mapping);
    CHECK(sd.tensors[0].view.mapping->path() == d / "model-00002-of-00002.safetensors");
    CHECK(sd.tensors[2].view.mapping->path() == d / "model-00001-of-00002.safetensors");
    CHECK(reinterpret_cast<const float*>(sd.tensors[1].view.data())[3] == 103.0f);
    CHECK(sd.tensors[0].view.storage_key != sd.tensors[2].view.storage_key);
    CHECK(output_source_of(arg).folder == d.path());
  }
  CHECK(checkpoint_files(d.path()) == std::vector<std::string>{d / kSafetensorsIndexName,
                                                               d / "model-00002-of-00002.safetensors",
                                                               d / "model-00001-of-00002.safetensors"});
  CHECK(output_source_of(d / "model-00001-of-00002.safetensors").folder.empty());
  CHECK(checkpoint_files(d / "model-00001-of-00002.safetensors") ==
        std::vector<std::string>{d / "model-00001-of-00002.safetensors"});
}

TEST_CASE("shards that disagree with the weight map are refused", "[sharded_input]") {
  struct bad {
    const char* what;
    std::string weight_map;
    std::string message;
  };
  const std::vector<bad> cases = {
      {"missing shard", R"({"a": "one.safetensors", "b": "two.safetensors", "c": "gone.safetensors"})",
       "shard 'gone.safetensors' is missing (listed for tensor 'c')"},
      {"tensor not in its shard", R"({"a": "one.safetensors", "b": "two.safetensors", "q": "one.safetensors"})",
       "tensor 'q' is listed in shard 'one.safetensors' but is not in it"},
      {"extra tensor", R"({"a": "one.safetensors"})",
       "shard 'one.safetensors' holds tensor 'x', which the weight map does not list"},
      {"listed under another shard", R"({"a": "two.safetensors", "x": "one.safetensors", "b": "two.safetensors"})",
       "shard 'one.safetensors' holds tensor 'a', which the weight map lists in shard 'two.safetensors'"},
      {"in two shards", R"({"a": "one.safetensors", "x": "one.safetensors", "b": "dup.safetensors"})",
       "tensor 'a' is in shard 'one.safetensors' and in shard 'dup.safetensors'"},
      {"a shard that is no checkpoint", R"({"a": "one.safetensors", "x": "one.safetensors", "n": "junk.bin"})",
       "junk.bin: not a PyTorch checkpoint"},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    temp_dir d;
    write_shard(d / "one.safetensors", {{"a", 1}, {"x", 1}});
    write_shard(d / "two.safetensors", {{"b", 1}});
    write_shard(d / "dup.safetensors", {{"a", 1}, {"b", 2}});
    write_file(d / "junk.bin", "not a checkpoint");
    write_file(d / "m.safetensors.index.json", index_with(c.weight_map));
    exit_code code = exit_code::ok;
    const std::string message = error_of([&] { load_state_dict(d / "m.safetensors.index.json"); }, &code);
    CHECK(code == exit_code::bad_input);
    CHECK_THAT(message, Catch::Contains(c.message));
  }
}

TEST_CASE("a total_size that disagrees is a warning, not an error", "[sharded_input]") {
  temp_dir d;
  write_shard(d / "s.safetensors", {{"a", 3}});
  write_file(d / kSafetensorsIndexName, index_with(R"({"a": "s.safetensors"})", R"({"total_size": 13})"));
  CHECK(load_state_dict(d.path()).tensors.size() == 1);
}

TEST_CASE("folders: which file is read, and a folder without a checkpoint", "[sharded_input]") {
  temp_dir d;
  exit_code code = exit_code::ok;
  CHECK_THAT(error_of([&] { load_state_dict(d.path()); }, &code), Catch::Contains("a folder without a checkpoint") &&
                                                                      Catch::Contains(kSafetensorsIndexName) &&
                                                                      Catch::Contains("it holds none"));
  CHECK(code == exit_code::bad_input);
  write_file(d / "config.json", "{}");
  for (int i = 0; i < 20; ++i) write_file(d / ("f" + std::to_string(i + 10)), "");
  CHECK_THAT(error_of([&] { load_state_dict(d.path()); }),
             Catch::Contains("'config.json', 'f10'") && Catch::Contains("'f28', ... (21 in all)"));

  // transformers' from_pretrained order, each file added taking over from the ones before:
  // pytorch_model.bin.index.json < pytorch_model.bin < model.safetensors.index.json < model.safetensors.
  write_shard(d / "p.safetensors", {{"from_pt_index", 1}});
  write_file(d / kTorchIndexName, index_with(R"({"from_pt_index": "p.safetensors"})"));
  CHECK(load_state_dict(d.path()).tensors.front().name == "from_pt_index");
  write_shard(d / kTorchSingleName, {{"single_bin", 1}});  // safetensors bytes: read by content
  CHECK(load_state_dict(d.path()).tensors.front().name == "single_bin");
  write_shard(d / "s.safetensors", {{"from_st_index", 1}});
  write_file(d / kSafetensorsIndexName, index_with(R"({"from_st_index": "s.safetensors"})"));
  CHECK(load_state_dict(d.path()).tensors.front().name == "from_st_index");
  write_shard(d / kSafetensorsSingleName, {{"single", 1}});
  CHECK(load_state_dict(d.path()).tensors.front().name == "single");
  CHECK(checkpoint_files(d.path()) == std::vector<std::string>{d / kSafetensorsSingleName});
  CHECK(load_state_dict(d / kTorchIndexName).tensors.front().name == "from_pt_index");
}

TEST_CASE("folders: config.json's transformers_weights is read first, as from_pretrained reads it", "[sharded_input]") {
  temp_dir d;
  write_shard(d / kSafetensorsSingleName, {{"single", 1}});
  write_shard(d / "custom.safetensors", {{"named", 1}});
  write_file(d / "config.json", R"({"transformers_weights": "custom.safetensors"})");
  CHECK(load_state_dict(d.path()).tensors.front().name == "named");
  write_shard(d / "c.safetensors", {{"named_index", 1}});
  write_file(d / "custom.safetensors.index.json", index_with(R"({"named_index": "c.safetensors"})"));
  write_file(d / "config.json", R"({"transformers_weights": "custom.safetensors.index.json"})");
  CHECK(load_state_dict(d.path()).tensors.front().name == "named_index");
  for (const char* other : {R"({"transformers_weights": null})", "{}", "not json", "[1]"}) {
    write_file(d / "config.json", other);
    CHECK(load_state_dict(d.path()).tensors.front().name == "single");
  }
  struct bad_case {
    const char* config;
    const char* message;
    exit_code code;
  };
  for (const bad_case& c : std::vector<bad_case>{
           {R"({"transformers_weights": "../custom.safetensors"})", "inside the folder", exit_code::bad_input},
           {R"({"transformers_weights": "/custom.safetensors"})", "inside the folder", exit_code::bad_input},
           {R"({"transformers_weights": "custom.bin"})", "a .safetensors file or index", exit_code::bad_input},
           {R"({"transformers_weights": ".safetensors"})", "a .safetensors file or index", exit_code::bad_input},
           {R"({"transformers_weights": 3})", "found 3", exit_code::bad_input},
           {R"({"transformers_weights": "gone.safetensors"})", "not a file in", exit_code::io},
       }) {
    write_file(d / "config.json", c.config);
    exit_code code = exit_code::ok;
    CHECK_THAT(error_of([&] { load_state_dict(d.path()); }, &code), Catch::Contains(c.message));
    CHECK(code == c.code);
  }
  // The size read of config.json, at its edge (literal: 16 MiB).
  const std::string named = R"({"transformers_weights": "custom.safetensors"})";
  write_file(d / "config.json", named + std::string(16777216 - named.size(), ' '));
  CHECK(load_state_dict(d.path()).tensors.front().name == "named");
  write_file(d / "config.json", named + std::string(16777217 - named.size(), ' '));
  CHECK_THAT(error_of([&] { load_state_dict(d.path()); }), Catch::Contains("larger than 16777216 bytes"));
}

TEST_CASE("an index that cannot be read", "[sharded_input]") {
  temp_dir d;
  exit_code code = exit_code::ok;
  CHECK_THAT(error_of([&] { load_state_dict(d / "model.safetensors.index.json"); }, &code),
             Catch::Contains("cannot open"));
  CHECK(code == exit_code::io);
  ::mkdir((d / "x.index.json").c_str(), 0755);  // a folder named like an index holds no checkpoint
  CHECK_THAT(error_of([&] { load_state_dict(d / "x.index.json"); }, &code), Catch::Contains("without a checkpoint"));
}

TEST_CASE("weight file names: transformers', diffusers' and PEFT's", "[sharded_input]") {
  CHECK(single_file_name(file_format::safetensors) == kSafetensorsSingleName);
  CHECK(single_file_name(file_format::torch) == kTorchSingleName);
  CHECK(index_file_name(file_format::safetensors) == kSafetensorsIndexName);
  CHECK(index_file_name(file_format::torch) == kTorchIndexName);
  CHECK(single_file_name(file_format::torch, weights_names::diffusers) == "diffusion_pytorch_model.bin");
  CHECK(index_file_name(file_format::safetensors, weights_names::diffusers) ==
        "diffusion_pytorch_model.safetensors.index.json");
  CHECK(shard_file_name(file_format::safetensors, 2, 3, weights_names::diffusers) ==
        "diffusion_pytorch_model-00002-of-00003.safetensors");
  CHECK(single_file_name(file_format::safetensors, weights_names::peft) == "adapter_model.safetensors");
  CHECK(index_file_name(file_format::torch, weights_names::peft) == "adapter_model.bin.index.json");
  for (const weights_names n : kAllWeightsNames) CHECK(weights_names_from_name(weights_names_name(n)) == n);
  CHECK_FALSE(weights_names_from_name("Diffusers"));
  CHECK_FALSE(weights_names_from_name(""));
}

TEST_CASE("folders of diffusers and PEFT, and what a file's name says", "[sharded_input]") {
  temp_dir d;
  write_shard(d / "diffusion_pytorch_model.bin", {{"unet_bin", 1}});  // not a torch file, never read
  CHECK(locate_checkpoint(d.path()).names.names == weights_names::diffusers);
  write_shard(d / "diffusion_pytorch_model.safetensors", {{"unet", 1}});
  CHECK(load_state_dict(d.path()).tensors.front().name == "unet");
  write_shard(d / "u.safetensors", {{"unet_sharded", 1}});
  write_file(d / "diffusion_pytorch_model.safetensors.index.json", index_with(R"({"unet_sharded": "u.safetensors"})"));
  checkpoint_location at = locate_checkpoint(d.path() + "/");
  CHECK(at.index == d / "diffusion_pytorch_model.safetensors.index.json");
  CHECK(at.folder == d.path());
  CHECK(at.names.names == weights_names::diffusers);
  write_shard(d / "adapter_model.safetensors", {{"lora", 1}});
  CHECK(locate_checkpoint(d.path()).names.names == weights_names::diffusers);  // diffusers' before PEFT's
  write_shard(d / kSafetensorsSingleName, {{"single", 1}});
  at = locate_checkpoint(d.path());
  CHECK(at.names.names == weights_names::transformers);  // transformers' first
  CHECK(at.file == d / kSafetensorsSingleName);

  temp_dir p;
  write_shard(p / "adapter_model.bin", {{"lora", 1}});
  CHECK(locate_checkpoint(p.path()).names.names == weights_names::peft);
  CHECK(locate_checkpoint(p.path()).file == p / "adapter_model.bin");

  CHECK(locate_checkpoint("x/diffusion_pytorch_model-00001-of-00002.safetensors").names.names ==
        weights_names::diffusers);
  CHECK(locate_checkpoint("diffusion_pytorch_model.safetensors").names.names == weights_names::diffusers);
  CHECK(locate_checkpoint("x/adapter_model.safetensors").names.names == weights_names::peft);
  CHECK(locate_checkpoint("x/adapter_model.bin.index.json").names.names == weights_names::peft);
  CHECK(locate_checkpoint("x/adapter_model").names.names == weights_names::transformers);  // the stem alone
  CHECK(locate_checkpoint("x/adapter_models.safetensors").names.names == weights_names::transformers);
  CHECK(locate_checkpoint("adapter_model/model.safetensors").names.names == weights_names::transformers);
  CHECK(locate_checkpoint("x/model.safetensors").names.names == weights_names::transformers);
}

TEST_CASE("a diffusers pipeline's root names its component folders", "[sharded_input]") {
  temp_dir d;
  write_file(d / "model_index.json", "{}");
  exit_code code = exit_code::ok;
  CHECK_THAT(error_of([&] { locate_checkpoint(d.path()); }, &code),
             Catch::Contains("a diffusers pipeline (model_index.json found)") &&
                 Catch::Contains("none holds weights; it holds 'model_index.json'"));
  CHECK(code == exit_code::bad_input);
  for (const char* sub : {"unet", "vae", "scheduler", "text_encoder"}) ::mkdir((d / sub).c_str(), 0755);
  write_shard(d / "unet/diffusion_pytorch_model.safetensors", {{"a", 1}});
  write_shard(d / "vae/diffusion_pytorch_model.bin", {{"a", 1}});
  write_shard(d / "text_encoder/model.safetensors", {{"a", 1}});
  write_file(d / "scheduler/scheduler_config.json", "{}");
  const std::string message = error_of([&] { locate_checkpoint(d.path()); });
  CHECK_THAT(message, Catch::Contains("average its component folders one by one instead ('text_encoder/', 'unet/', "
                                      "'vae/')"));
  CHECK_THAT(message, !Catch::Contains("scheduler"));
  write_shard(d / kSafetensorsSingleName, {{"own", 1}});  // weights of its own: read them
  CHECK(locate_checkpoint(d.path()).file == d / kSafetensorsSingleName);
}

TEST_CASE("variants: file names as _add_variant makes them, and read back", "[sharded_input]") {
  const weights_naming fp16(weights_names::diffusers, "fp16");
  CHECK(single_file_name(file_format::safetensors, fp16) == "diffusion_pytorch_model.fp16.safetensors");
  CHECK(index_file_name(file_format::safetensors, fp16) == "diffusion_pytorch_model.safetensors.index.fp16.json");
  CHECK(shard_file_name(file_format::torch, 1, 2, weights_naming(weights_names::transformers, "bf16")) ==
        "pytorch_model.bf16-00001-of-00002.bin");
  for (const std::string name :
       {"diffusion_pytorch_model.fp16.safetensors", "diffusion_pytorch_model.safetensors.index.fp16.json",
        "diffusion_pytorch_model.fp16-00001-of-00002.safetensors"}) {
    INFO(name);
    const auto known = naming_of_weight_file(name);
    REQUIRE(known);
    CHECK(known->first.names == weights_names::diffusers);
    CHECK(known->first.variant == "fp16");
  }
  const auto plain = naming_of_weight_file("model-00001-of-00002.safetensors");
  REQUIRE(plain);
  CHECK(plain->first.variant.empty());
  CHECK_FALSE(naming_of_weight_file("model.fp-16.safetensors"));          // '-' is no variant's
  CHECK_FALSE(naming_of_weight_file("model-1-of-2.safetensors"));         // fewer than 5 digits
  CHECK(naming_of_weight_file("model-00001-of-00002.safetensors"));       // 5 digits: the last valid
  CHECK_FALSE(naming_of_weight_file("model-0001-of-00002.safetensors"));  // 4: the first invalid
  CHECK_FALSE(naming_of_weight_file("model-00001-of-0002.safetensors"));
  CHECK_FALSE(naming_of_weight_file("optimizer.pt"));
  CHECK(is_index_file_name("model.safetensors.index.json"));
  CHECK(is_index_file_name("model.safetensors.index.fp16.json"));
  CHECK_FALSE(is_index_file_name("model.safetensors.index..json"));
  CHECK(is_variant_name(std::string(64, 'a')));
  CHECK_FALSE(is_variant_name(std::string(65, 'a')));
  CHECK_FALSE(is_variant_name(""));

  temp_dir d;  // one variant, no plain weights: read as that variant
  write_shard(d / "diffusion_pytorch_model.fp16.safetensors", {{"unet", 1}});
  checkpoint_location at = locate_checkpoint(d.path());
  CHECK(at.file == d / "diffusion_pytorch_model.fp16.safetensors");
  CHECK(at.names.variant == "fp16");
  write_shard(d / "diffusion_pytorch_model.bf16.safetensors", {{"unet", 1}});  // two: the user names one
  CHECK_THROWS_AS(locate_checkpoint(d.path()), input_error);
  write_shard(d / "diffusion_pytorch_model.safetensors", {{"unet", 1}});  // plain weights win
  at = locate_checkpoint(d.path());
  CHECK(at.file == d / "diffusion_pytorch_model.safetensors");
  CHECK(at.names.variant.empty());
}

TEST_CASE("variants: an index without a variant reads back as no variant", "[sharded_input]") {
  for (const auto& [name, names, format] :
       {std::tuple{"model.safetensors.index.json", weights_names::transformers, file_format::safetensors},
        std::tuple{"pytorch_model.bin.index.json", weights_names::transformers, file_format::torch},
        std::tuple{"diffusion_pytorch_model.safetensors.index.json", weights_names::diffusers,
                   file_format::safetensors},
        std::tuple{"adapter_model.bin.index.json", weights_names::peft, file_format::torch}}) {
    INFO(name);
    const auto known = naming_of_weight_file(name);
    REQUIRE(known);
    CHECK(known->first.names == names);
    CHECK(known->first.variant.empty());
    CHECK(known->second == format);
    CHECK(index_file_name(format, known->first) == name);
  }
}
