// update-bn: the dataset readers (.npy header parsing, torch.save, safetensors and raw data, checked
// against what Python wrote) and the library entry point against torch's update_bn.
#include <sys/stat.h>

#include <ATen/Functions.h>
#include <catch2/catch.hpp>
#include <fstream>

#include "formats/dataset/dataset.h"
#include "formats/io/load.h"
#include "libtorch/bn_replay.h"
#include "libtorch/module.h"
#include "libtorch/tensor_bridge.h"
#include "support.h"
#include "util/crc32.h"
#include "util/error.h"

using namespace swavg;
using swavg::test::fixture;

namespace {

std::string bn_fixture(const std::string& name) { return fixture("bn/" + name); }

std::string scratch(const std::string& name) {
  std::string dir = std::string(SWAVG_FIXTURES_DIR) + "/scratch";
  ::mkdir(dir.c_str(), 0755);
  return dir + "/" + name;
}

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A .npy file as numpy lays it out: magic, version, header length, the header padded with spaces
// and a newline to a multiple of 64 bytes, then `data`.
std::string npy(const std::string& header, int major = 1, const std::string& data = "", bool pad = true) {
  std::string out = std::string("\x93NUMPY", 6) + static_cast<char>(major) + '\0';
  const size_t length_size = major == 1 ? 2 : 4;
  std::string text = header;
  if (pad) {
    const size_t total = out.size() + length_size + text.size() + 1;
    text += std::string((64 - total % 64) % 64, ' ') + "\n";
  }
  uint32_t n = static_cast<uint32_t>(text.size());
  out.append(reinterpret_cast<const char*>(&n), length_size);
  return out + text + data;
}

npy_header parse(const std::string& bytes) {
  return parse_npy_header(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "test.npy");
}

uint32_t crc32_of(const std::string& s) { return crc32_update(0, s.data(), s.size()); }

}  // namespace

TEST_CASE("npy headers numpy writes are parsed", "[bn][npy]") {
  auto h = parse(npy("{'descr': '<f4', 'fortran_order': False, 'shape': (10, 3, 8, 8), }"));
  CHECK(h.type == dtype::float32);
  CHECK_FALSE(h.fortran_order);
  CHECK(h.shape == std::vector<int64_t>{10, 3, 8, 8});
  CHECK(h.data_offset % 64 == 0);

  h = parse(npy("{'descr': '|u1', 'fortran_order': True, 'shape': (7,), }", 2));
  CHECK(h.type == dtype::uint8);
  CHECK(h.fortran_order);
  CHECK(h.shape == std::vector<int64_t>{7});

  h = parse(npy("{\"shape\": (3L, 2L), \"fortran_order\": False, \"descr\": \"<i8\"}", 3));
  CHECK(h.type == dtype::int64);
  CHECK(h.shape == std::vector<int64_t>{3, 2});

  h = parse(npy("{'descr': '<f8', 'fortran_order': False, 'shape': (), }"));
  CHECK(h.shape.empty());

  const std::vector<std::pair<std::string, dtype>> codes = {
      {"<f2", dtype::float16},   {"<f8", dtype::float64},     {"|i1", dtype::int8},
      {"<i2", dtype::int16},     {"<i4", dtype::int32},       {"|b1", dtype::bool_},
      {"<c8", dtype::complex64}, {"<c16", dtype::complex128}, {"=f4", dtype::float32}};
  for (const auto& [code, type] : codes) {
    INFO(code);
    CHECK(parse(npy("{'descr': '" + code + "', 'fortran_order': False, 'shape': (2,), }")).type == type);
  }
}

TEST_CASE("malformed npy headers are refused with what is wrong", "[bn][npy]") {
  struct bad {
    std::string bytes;
    std::string message;
  };
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  const std::vector<bad> cases = {
      {"\x93NUMPX\x01\x00", "not a .npy file"},
      {std::string("\x93NUMPY\x01", 7), "truncated inside its preamble"},
      {npy(ok_dict, 4), "version 4.0 is not supported"},
      {std::string("\x93NUMPY\x01\x00\xff\x00{", 11), "runs past the end of the file"},
      {npy("{'descr': '<f4', 'fortran_order': False}"), "missing 'shape'"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}"), "unexpected key 'extra'"},
      {npy("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}"), "duplicate key 'descr'"},
      {npy("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }"), "big-endian"},
      {npy("{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }"), "'<u4' is not supported"},
      {npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }"), "'|O' is not supported"},
      {npy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }"), "structured dtype"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }"), "negative dimension"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"), "too large"},
      {npy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,), }"), "expected True or False"},
      {npy("{'descr' '<f4', 'fortran_order': False, 'shape': (2,), }"), "expected ':'"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }"), "expected '('"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3"), "expected ')'"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } junk"), "unexpected text after"},
      {npy("{'descr': 'f4\\x00', 'fortran_order': False, 'shape': (2,), }"), "escape sequences"},
      {npy(std::string("{'descr': '<f4',") + '\0' + " 'fortran_order': False, 'shape': (2,), }"), "NUL byte"},
      {npy("'descr'"), "expected '{'"},
      {npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), ", 1, "", false), "(end of header)"},
  };
  for (const auto& c : cases) {
    INFO(c.message);
    REQUIRE_THROWS_AS(parse(c.bytes), input_error);
    CHECK_THROWS_WITH(parse(c.bytes), Catch::Contains(c.message) && Catch::Contains("test.npy"));
  }
}

TEST_CASE("every data format reads what Python wrote", "[bn][dataset][fixtures]") {
  const auto manifest = swavg::test::read_json(bn_fixture("data.json"));
  struct variant {
    std::string file;
    dataset_options options;
    std::string format;
    std::string key;
  };
  const std::vector<variant> variants = {
      {"data.npy", {}, "npy", ""},
      {"data_fortran.npy", {}, "npy", ""},
      {"data_f64.npy", {}, "npy", ""},
      {"data_tensor.pt", {}, "torch", ""},
      {"data_strided.pt", {}, "torch", ""},
      {"data_list.pt", {}, "torch", "0"},
      {"data_dict.pt", {"", "batch.images", {}, std::nullopt}, "torch", "batch.images"},
      {"data.safetensors", {"", "images", {}, std::nullopt}, "safetensors", "images"},
      {"data_single.safetensors", {}, "safetensors", "x"},
      {"data.bin", {"", "", {3, 8, 8}, std::nullopt}, "raw", ""},
      {"data_u8.bin", {"", "", {3, 8, 8}, dtype::uint8}, "raw", ""},
  };
  for (auto v : variants) {
    INFO(v.file);
    v.options.path = bn_fixture(v.file);
    const dataset d = open_dataset(v.options);
    const auto& want = manifest.at(v.file);
    CHECK(d.format == v.format);
    CHECK(d.key == v.key);
    CHECK(dtype_name(d.samples.type) == want.at("dtype").get<std::string>());
    CHECK(d.samples.shape == want.at("shape").get<std::vector<int64_t>>());
    CHECK(d.size() == d.samples.shape[0]);
    CHECK(crc32_of(swavg::test::row_major_bytes(d.samples)) == want.at("crc32").get<uint32_t>());
  }
  SECTION("strided and Fortran-ordered data keep their strides") {
    CHECK_FALSE(open_dataset({bn_fixture("data_strided.pt"), "", {}, std::nullopt}).samples.is_contiguous());
    CHECK(open_dataset({bn_fixture("data_fortran.npy"), "", {}, std::nullopt}).samples.strides[0] == 1);
  }
  SECTION("a dict's first tensor is the default input") {
    const dataset d = open_dataset({bn_fixture("data_dict.pt"), "", {}, std::nullopt});
    CHECK(d.key == "labels");
    CHECK(d.samples.type == dtype::int64);
  }
}

TEST_CASE("data that cannot be replayed is refused", "[bn][dataset][fixtures]") {
  auto open = [](const std::string& path, const std::string& key = "", std::vector<int64_t> shape = {},
                 std::optional<dtype> type = std::nullopt) {
    return open_dataset({path, key, std::move(shape), type});
  };

  CHECK_THROWS_AS(open(bn_fixture("no_such_file.npy")), io_error);

  const std::string truncated = scratch("truncated.npy");
  write_file(truncated, npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 2), }", 1, std::string(20, 'x')));
  CHECK_THROWS_WITH(open(truncated), Catch::Contains("32 bytes") && Catch::Contains("holds 20 bytes"));

  const std::string scalar = scratch("scalar.npy");
  write_file(scalar, npy("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", 1, std::string(4, 'x')));
  CHECK_THROWS_WITH(open(scalar), Catch::Contains("0-dimensional"));

  const std::string empty_array = scratch("empty.npy");
  write_file(empty_array, npy("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 3), }"));
  CHECK_THROWS_WITH(open(empty_array), Catch::Contains("no samples"));
  const std::string empty_samples = scratch("empty_samples.npy");
  write_file(empty_samples, npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 0), }"));
  CHECK_THROWS_WITH(open(empty_samples), Catch::Contains("empty ones"));

  const std::string text = scratch("notes.txt");
  write_file(text, "just some text, not data");
  CHECK_THROWS_AS(open(text), input_error);
  CHECK_THROWS_WITH(open(text), Catch::Contains("--shape"));

  CHECK_THROWS_WITH(open(bn_fixture("data.bin"), "", {3, 7, 7}), Catch::Contains("not a whole number of samples"));
  CHECK_THROWS_AS(open(bn_fixture("data.bin"), "", {3, 0, 8}), usage_error);
  CHECK_THROWS_AS(open(bn_fixture("data.bin"), "", {}, dtype::float32), usage_error);
  CHECK_THROWS_AS(open(bn_fixture("data.npy"), "images"), usage_error);

  CHECK_THROWS_AS(open(bn_fixture("data.safetensors")), usage_error);
  CHECK_THROWS_WITH(open(bn_fixture("data.safetensors"), "nope"), Catch::Contains("'labels', 'images'"));
  CHECK_THROWS_WITH(open(bn_fixture("data_dict.pt"), "batch.nope"), Catch::Contains("'images'"));
  CHECK_THROWS_WITH(open(bn_fixture("data_dict.pt"), "batch"), Catch::Contains("expected a tensor"));
  CHECK_THROWS_WITH(open(bn_fixture("data_list.pt"), "5"), Catch::Contains("no entry '5'"));
  CHECK(open(bn_fixture("data_list.pt"), "1").samples.type == dtype::int64);
  CHECK_THROWS_WITH(open(bn_fixture("cnn_scripted.ts")), Catch::Contains("TorchScript"));
  CHECK_THROWS_WITH(open(fixture("training.pt")), Catch::Contains("choose one with --data-key"));
}

TEST_CASE("update_batchnorm matches torch's update_bn", "[bn][update][fixtures]") {
  const state_dict weights = load_state_dict(bn_fixture("weights.pt"));
  const dataset data = open_dataset({bn_fixture("data.npy"), "", {}, std::nullopt});
  bn_options options;
  options.batch_size = 16;
  options.progress = false;
  const update_bn_result result =
      update_batchnorm(bn_fixture("cnn_scripted.ts"), weights.tensors, weights.path, data, options);
  CHECK_FALSE(result.averaged_layout);
  CHECK(result.report.batches == 4);
  CHECK(result.report.samples == 50);
  REQUIRE(result.report.modules.size() == 4);
  CHECK(result.report.modules[1].name == "bn2");
  CHECK_FALSE(result.report.modules[1].momentum.has_value());
  CHECK(result.report.modules[3].batches == 0);

  const state_dict want = load_state_dict(bn_fixture("expected_cnn_bs16.pt"));
  REQUIRE(result.tensors.size() == want.tensors.size());
  for (size_t i = 0; i < want.tensors.size(); ++i) {
    INFO(want.tensors[i].name);
    CHECK(result.tensors[i].name == want.tensors[i].name);
    const at::Tensor found = to_tensor(result.tensors[i].view), expected = to_tensor(want.tensors[i].view);
    if (expected.is_floating_point())
      CHECK(at::allclose(found, expected, 1e-5, 1e-6));
    else
      CHECK(at::equal(found, expected));
  }

  SECTION("data not aligned to its element size gives the same result") {
    std::ifstream in(bn_fixture("data.npy"), std::ios::binary);
    const std::string original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const npy_header h = parse(original);
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (50, 3, 8, 8), }";
    while ((10 + header.size() + 1) % 4 != 1) header += ' ';
    const std::string path = scratch("unaligned.npy");
    write_file(path, npy(header + "\n", 1, original.substr(h.data_offset), false));
    const dataset unaligned = open_dataset({path, "", {}, std::nullopt});
    REQUIRE(reinterpret_cast<uintptr_t>(unaligned.samples.data()) % 4 != 0);
    const update_bn_result r =
        update_batchnorm(bn_fixture("cnn_scripted.ts"), weights.tensors, weights.path, unaligned, options);
    REQUIRE(r.tensors.size() == result.tensors.size());
    for (size_t i = 0; i < r.tensors.size(); ++i)
      CHECK(at::equal(to_tensor(r.tensors[i].view), to_tensor(result.tensors[i].view)));
  }
  SECTION("averaged-model layout in, averaged-model layout out") {
    const state_dict swa = load_state_dict(bn_fixture("weights_swa.pt"));
    const update_bn_result r = update_batchnorm(bn_fixture("cnn_scripted.ts"), swa.tensors, swa.path, data, options);
    CHECK(r.averaged_layout);
    CHECK(r.tensors.front().name == "module.conv1.weight");
    CHECK(r.tensors.back().name == "n_averaged");
  }
  SECTION("names that do not match are listed") {
    const state_dict renamed = load_state_dict(bn_fixture("weights_renamed.pt"));
    CHECK_THROWS_AS(update_batchnorm(bn_fixture("cnn_scripted.ts"), renamed.tensors, renamed.path, data, options),
                    mismatch_error);
  }
  SECTION("a model file that is not TorchScript") {
    CHECK_THROWS_AS(model_kind(bn_fixture("weights.pt")), input_error);
    CHECK_THROWS_AS(update_batchnorm(bn_fixture("weights.pt"), {}, "", data, options), input_error);
  }
}
