// torch.save archives written by real PyTorch, read by swavg and compared with what Python read.
#include <catch2/catch.hpp>

#include "formats/file/save.h"
#include "formats/torch/torch_file.h"
#include "formats/torch/torch_writer.h"
#include "formats/zip/zip_reader.h"
#include "support.h"
#include "util/atomic_file.h"
#include "util/crc32.h"
#include "util/error.h"
#include "util/mapped_file.h"

using namespace swavg;
using swavg::test::fixture;

namespace {

state_dict read(const std::string& name, const std::string& key = "") {
  return read_torch_file(mapped_file::open(fixture(name)), key);
}

void check_against_manifest(const state_dict& sd, const std::string& manifest) {
  auto m = test::read_json(fixture(manifest));
  const auto& want = m["tensors"];
  REQUIRE(sd.tensors.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const auto& t = sd.tensors[i];
    INFO("tensor " << want[i]["name"]);
    CHECK(t.name == want[i]["name"].get<std::string>());
    CHECK(dtype_name(t.view.type) == want[i]["dtype"].get<std::string>());
    CHECK(t.view.shape == want[i]["shape"].get<std::vector<int64_t>>());
    CHECK(t.view.strides == want[i]["stride"].get<std::vector<int64_t>>());
    CHECK(t.view.offset == want[i]["storage_offset"].get<int64_t>());
    std::string bytes = test::row_major_bytes(t.view);
    CHECK(crc32_update(0, bytes.data(), bytes.size()) == want[i]["crc32"].get<uint32_t>());
  }
  CHECK(sd.key == m["key"].get<std::string>());
}

}  // namespace

TEST_CASE("resnet18 state_dict matches what PyTorch reads", "[torch_file][fixtures]") {
  check_against_manifest(read("resnet18.pt"), "resnet18.json");
}

TEST_CASE("training checkpoint: model found, opaque objects listed", "[torch_file][fixtures]") {
  state_dict sd = read("training.pt");
  check_against_manifest(sd, "training.json");
  std::vector<std::string> opaque;
  for (const auto& o : sd.opaque) opaque.push_back(o.path + "=" + o.type);
  CHECK(std::find(opaque.begin(), opaque.end(), "args=argparse.Namespace") != opaque.end());
  CHECK(std::find_if(opaque.begin(), opaque.end(),
                     [](const std::string& s) { return s.rfind("best=numpy", 0) == 0; }) != opaque.end());
}

TEST_CASE("a --key picks a nested dict, and a wrong key says what is there", "[torch_file][fixtures]") {
  check_against_manifest(read("training.pt", "model"), "training.json");
  CHECK_THROWS_WITH(read("training.pt", "nope"), Catch::Contains("no entry 'nope'") && Catch::Contains("'model'"));
  CHECK_THROWS_WITH(read("training.pt", "epoch"), Catch::Contains("type int, expected a dict of tensors"));
  CHECK_THROWS_AS(read("training.pt", "model.conv1.weight.x"), usage_error);
}

TEST_CASE("every dtype, tied weights, views, 0-dim and empty tensors", "[torch_file][fixtures]") {
  state_dict sd = read("dtypes.pt");
  check_against_manifest(sd, "dtypes.json");
  auto find = [&](const std::string& n) -> const tensor_view& {
    for (const auto& t : sd.tensors)
      if (t.name == n) return t.view;
    FAIL("no tensor " << n);
    throw;
  };
  CHECK(find("tied.a").storage == find("tied.b").storage);
  CHECK(find("transposed").storage == find("row_view").storage);
  CHECK(find("transposed").storage_key == find("row_view").storage_key);
  CHECK_FALSE(find("transposed").is_contiguous());
}

TEST_CASE("the newer 2.x layout with extra records and any root name", "[torch_file][fixtures]") {
  check_against_manifest(read("crafted/archive_v2.pt"), "crafted/archive_v2.json");
}

TEST_CASE("a TorchScript archive is told apart", "[torch_file][fixtures]") {
  CHECK_THROWS_WITH(read("scripted.ts"), Catch::Contains("TorchScript"));
}

TEST_CASE("malformed tensors are refused before any byte is read", "[torch_file][fixtures]") {
  struct bad_case {
    const char* file;
    const char* message;
  };
  const bad_case cases[] = {
      {"storage_short.pt", "holds 44 bytes but its FloatStorage of 12 elements needs 48"},
      {"view_past_end.pt", "needs storage elements up to 16 but the storage has 12"},
      {"stride_past_end.pt", "needs storage elements up to 14 but the storage has 12"},
      {"negative_stride.pt", "stride has a negative entry"},
      {"negative_size.pt", "size has a negative entry"},
      {"negative_offset.pt", "storage offset is negative"},
      {"size_overflow.pt", "element count that overflows"},
      {"stride_overflow.pt", "needs storage elements up to"},
      {"numel_overflow.pt", "needs more than 2^64"},
      {"missing_storage.pt", "'archive/data/0' is missing"},
      {"compressed_storage.pt", "compressed"},
      {"big_endian.pt", "byteorder record says 'big'"},
      {"no_state_dict.pt", "no state dict found"},
  };
  for (const auto& c : cases) {
    INFO(c.file);
    const std::string path = fixture(std::string("crafted/") + c.file);
    try {
      read_torch_file(mapped_file::open(path), "");
      FAIL("no error for " << c.file);
    } catch (const input_error& e) {
      CHECK_THAT(e.what(), Catch::Contains(c.message) && Catch::Contains(path));
    }
  }
}

TEST_CASE("written archives read back with shared storages and exact bytes", "[torch_file][fixtures]") {
  state_dict in = read("dtypes.pt");
  const std::string out = std::string(SWAVG_FIXTURES_DIR) + "/written_by_test.pt";
  {
    atomic_file f(out);
    write_torch_state_dict(f, in.tensors);
    f.commit();
  }
  state_dict back = read_torch_file(mapped_file::open(out), "");
  REQUIRE(back.tensors.size() == in.tensors.size());
  for (size_t i = 0; i < in.tensors.size(); ++i) {
    INFO(in.tensors[i].name);
    CHECK(back.tensors[i].name == in.tensors[i].name);
    CHECK(back.tensors[i].view.type == in.tensors[i].view.type);
    CHECK(back.tensors[i].view.shape == in.tensors[i].view.shape);
    CHECK(back.tensors[i].view.strides == in.tensors[i].view.strides);
    CHECK(test::row_major_bytes(back.tensors[i].view) == test::row_major_bytes(in.tensors[i].view));
    CHECK(reinterpret_cast<uintptr_t>(back.tensors[i].view.storage) % 64 == 0);
  }
  CHECK(back.tensors[12].view.storage == back.tensors[13].view.storage);  // tied.a, tied.b
}

namespace {

// Written files go to one temporary folder per process, never into the fixtures (the unit cases run
// on a build folder that has none).
std::string scratch_path(const std::string& name) {
  static const test::temp_dir scratch;
  return scratch / name;
}

std::string data_pkl(const std::string& path) {
  auto file = mapped_file::open(path);
  zip_reader zip = read_zip(*file);
  const zip_entry& e = zip.stored(zip.root() + "/data.pkl");
  return std::string(reinterpret_cast<const char*>(zip.bytes(e)), e.size);
}

state_dict rewrite(const state_dict& in, const std::string& out) {
  {
    atomic_file f(out);
    write_torch_state_dict(f, in.tensors, in.objects);
    f.commit();
  }
  return read_torch_file(mapped_file::open(out), "");
}

}  // namespace

TEST_CASE("non-tensor entries are kept as pickle data and written back the same", "[torch_file][objects][fixtures]") {
  state_dict in = read("zoo/objects/ckpt_0.pt");
  REQUIRE(in.objects.size() == in.others.size());
  REQUIRE(in.document);
  std::vector<std::string> names;
  for (const auto& o : in.objects) names.push_back(o.name + "=" + o.type);
  CHECK(std::find(names.begin(), names.end(), "args=argparse.Namespace") != names.end());
  CHECK(std::find(names.begin(), names.end(), "cycle=list") != names.end());
  CHECK(std::find(names.begin(), names.end(), "3=str") != names.end());

  const std::string once = scratch_path("objects_once.pt"), twice = scratch_path("objects_twice.pt");
  state_dict back = rewrite(in, once);
  REQUIRE(back.objects.size() == in.objects.size());
  for (size_t i = 0; i < in.others.size(); ++i) {
    INFO(in.others[i].path);
    CHECK(back.others[i].path == in.others[i].path);
    CHECK(back.others[i].type == in.others[i].type);
    CHECK(back.others[i].value == in.others[i].value);
  }
  // Written again from what was read back: the same pickle bytes, so nothing was lost on the way.
  rewrite(back, twice);
  CHECK(data_pkl(once) == data_pkl(twice));
}

TEST_CASE("an entry holding a tensor cannot be carried", "[torch_file][objects][fixtures]") {
  // Lightning's callbacks hold a tensor (best_model_score) inside a dict.
  state_dict in = read("zoo/lightning/epoch=0.ckpt", "callbacks");
  REQUIRE(in.objects.size() == 1);
  atomic_file f(scratch_path("carried_tensor.pt"));
  CHECK_THROWS_WITH(write_torch_state_dict(f, in.tensors, in.objects),
                    Catch::Contains("non-tensor entry 'ModelCheckpoint") && Catch::Contains("holds a tensor"));
}

TEST_CASE("non-dense tensors and non-string keys are refused by name", "[torch_file][objects][fixtures]") {
  CHECK_THROWS_WITH(read("zoo/sparse/ckpt_0.pt"),
                    Catch::Contains("'adjacency' is a sparse tensor (torch._utils._rebuild_sparse_tensor)") &&
                        Catch::Contains("swavg averages dense tensors only"));
  CHECK_THROWS_AS(read("zoo/sparse/ckpt_0.pt"), input_error);
  CHECK_THROWS_WITH(read("zoo/int_key/ckpt_0.pt"), Catch::Contains("under the key 7 of type int"));
  // A plain state dict keeps no pickle document.
  CHECK_FALSE(read("zoo/torchvision/ckpt_0.pt").document);
}

TEST_CASE("a sink writes an alias as a second view of one storage record", "[torch_file][save][fixtures]") {
  const std::string out = scratch_path("alias.pt");
  const float data[4] = {1, 2, 3, 4};
  {
    tensor_sink sink(out, output_format::torch,
                     {{"a", dtype::float32, {4}, std::nullopt},
                      {"b", dtype::float32, {4}, 0},
                      {"c", dtype::float32, {2}, std::nullopt}},
                     {});
    sink.write(data, sizeof data);
    sink.write(data, 2 * sizeof(float));
    sink.commit();
  }
  state_dict back = read_torch_file(mapped_file::open(out), "");
  REQUIRE(back.tensors.size() == 3);
  CHECK(back.tensors[0].view.storage_key == back.tensors[1].view.storage_key);
  CHECK(back.tensors[0].view.storage_key != back.tensors[2].view.storage_key);
  CHECK(test::row_major_bytes(back.tensors[1].view) == std::string(reinterpret_cast<const char*>(data), sizeof data));
  // safetensors has no shared storages, and an alias must name an earlier tensor.
  CHECK_THROWS_AS(tensor_sink(scratch_path("alias.safetensors"), output_format::safetensors,
                              {{"a", dtype::float32, {4}, std::nullopt}, {"b", dtype::float32, {4}, 0}}, {}),
                  error);
  CHECK_THROWS_AS(tensor_sink(out + ".2", output_format::torch, {{"a", dtype::float32, {4}, 0}}, {}), error);
}

TEST_CASE("dtypes without a storage class are written as torch 2.x writes them and read back", "[torch_file][save]") {
  const std::string out = scratch_path("v3.pt");
  const uint8_t data[8] = {1, 2, 3, 4, 5, 6, 7, 0xff};
  const std::vector<dtype> types = {
      dtype::uint16,           dtype::uint32,          dtype::uint64,          dtype::float8_e4m3fn,
      dtype::float8_e5m2,      dtype::float8_e4m3fnuz, dtype::float8_e5m2fnuz, dtype::float8_e8m0fnu,
      dtype::float4_e2m1fn_x2, dtype::complex32,       dtype::bits8,           dtype::bits16,
      dtype::bits1x8,          dtype::bits2x4,         dtype::bits4x2,         dtype::float32};
  std::vector<tensor_spec> specs;
  for (dtype t : types) specs.push_back({dtype_name(t), t, {static_cast<int64_t>(8 / itemsize(t))}, std::nullopt});
  {
    tensor_sink sink(out, output_format::torch, specs, {});
    for (size_t i = 0; i < types.size(); ++i) sink.write(data, sizeof data);
    sink.commit();
  }
  state_dict back = read_torch_file(mapped_file::open(out), "");
  REQUIRE(back.tensors.size() == types.size());
  for (size_t i = 0; i < types.size(); ++i) {
    INFO(dtype_name(types[i]));
    CHECK(back.tensors[i].name == dtype_name(types[i]));
    CHECK(back.tensors[i].view.type == types[i]);
    CHECK(test::row_major_bytes(back.tensors[i].view) == std::string(reinterpret_cast<const char*>(data), 8));
  }
  // data.pkl names _rebuild_tensor_v3, torch.storage.UntypedStorage and each dtype, as torch.save does
  const auto file = mapped_file::open(out);
  const zip_reader zip = read_zip(*file);
  const zip_entry& pkl = zip.stored(zip.root() + "/data.pkl");
  const std::string text(reinterpret_cast<const char*>(zip.bytes(pkl)), pkl.size);
  CHECK(text.find("torch._utils\n_rebuild_tensor_v3\n") != std::string::npos);
  CHECK(text.find("torch.storage\nUntypedStorage\n") != std::string::npos);
  CHECK(text.find("torch\nfloat8_e8m0fnu\n") != std::string::npos);
  CHECK(text.find("torch\nFloatStorage\n") != std::string::npos);  // float32 stays _rebuild_tensor_v2
  CHECK(text.find("torch\nfloat32\n") == std::string::npos);

  // A uint16 view of a uint8 tensor's storage, as torch.save writes one: each with its own rebuild.
  const std::string shared = scratch_path("v3_shared.pt");
  {
    atomic_file f(shared);
    std::vector<named_tensor> tensors(2);
    tensors[0].name = "bytes";
    tensors[0].view = back.tensors.back().view;  // the float32 tensor's 8 bytes, as uint8
    tensors[0].view.type = dtype::uint8;
    tensors[0].view.shape = {8};
    tensors[1].name = "halves";
    tensors[1].view = tensors[0].view;
    tensors[1].view.type = dtype::uint16;
    tensors[1].view.shape = {3};
    tensors[1].view.offset = 1;
    write_torch_state_dict(f, tensors);
    f.commit();
  }
  state_dict two = read_torch_file(mapped_file::open(shared), "");
  REQUIRE(two.tensors.size() == 2);
  CHECK(two.tensors[0].view.storage_key == two.tensors[1].view.storage_key);
  CHECK(two.tensors[1].view.type == dtype::uint16);
  CHECK(test::row_major_bytes(two.tensors[1].view) == std::string(reinterpret_cast<const char*>(data) + 2, 6));
}
