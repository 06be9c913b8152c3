// Format detection by content, TorchScript through LibTorch, the bridge to at::Tensor, and the
// errors for files that are not checkpoints at all.
#include <sys/stat.h>
#include <unistd.h>

#include <ATen/Functions.h>
#include <catch2/catch.hpp>
#include <fstream>

#include "formats/io/load.h"
#include "libtorch/tensor_bridge.h"
#include "support.h"
#include "util/crc32.h"
#include "util/error.h"

using namespace swavg;
using swavg::test::fixture;

namespace {

std::string scratch(const std::string& name) {
  std::string dir = std::string(SWAVG_FIXTURES_DIR) + "/scratch";
  ::mkdir(dir.c_str(), 0755);
  return dir + "/" + name;
}

uint32_t crc32_of(const std::string& s) { return crc32_update(0, s.data(), s.size()); }

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

}  // namespace

TEST_CASE("formats are told by content, not by extension", "[load][fixtures]") {
  CHECK(detect_format(fixture("resnet18.pt")) == file_format::torch);
  CHECK(detect_format(fixture("scripted.ts")) == file_format::torchscript);
  const std::string renamed = scratch("scripted_named.pt");
  std::ifstream src(fixture("scripted.ts"), std::ios::binary);
  std::ofstream(renamed, std::ios::binary) << src.rdbuf();
  CHECK(detect_format(renamed) == file_format::torchscript);
}

TEST_CASE("TorchScript: parameters and buffers in state_dict order", "[load][fixtures]") {
  state_dict sd = load_state_dict(fixture("scripted.ts"));
  auto want = test::read_json(fixture("scripted.json"))["tensors"];
  REQUIRE(sd.format == file_format::torchscript);
  REQUIRE(sd.tensors.size() == want.size());
  std::map<std::string, nlohmann::json> by_name;
  for (const auto& w : want) by_name[w["name"]] = w;
  for (const auto& t : sd.tensors) {
    INFO(t.name);
    REQUIRE(by_name.count(t.name));
    const auto& w = by_name[t.name];
    CHECK(kind_name(t.kind) == w["kind"].get<std::string>());
    CHECK(dtype_name(t.view.type) == w["dtype"].get<std::string>());
    CHECK(t.view.shape == w["shape"].get<std::vector<int64_t>>());
    std::string bytes = test::row_major_bytes(t.view);
    CHECK(crc32_of(bytes) == w["crc32"].get<uint32_t>());
  }
  CHECK(sd.tensors[0].name == "conv1.weight");
  CHECK(sd.tensors[2].name == "bn1.weight");
  CHECK(sd.tensors[4].name == "bn1.running_mean");
}

TEST_CASE("views become tensors over the same bytes", "[load][fixtures]") {
  state_dict sd = load_state_dict(fixture("dtypes.pt"));
  for (const auto& t : sd.tensors) {
    INFO(t.name);
    at::Tensor x = to_tensor(t.view);
    CHECK(x.sizes().vec() == t.view.shape);
    CHECK(x.strides().vec() == t.view.strides);
    if (t.view.numel() > 0) CHECK(x.data_ptr() == static_cast<const void*>(t.view.data()));
    tensor_view back = from_tensor(x.contiguous());
    CHECK(test::row_major_bytes(back) == test::row_major_bytes(t.view));
  }
}

TEST_CASE("stripping prefixes removes module. and _orig_mod.", "[load][fixtures]") {
  load_options o;
  o.strip_prefixes = {"module.", "_orig_mod."};
  state_dict sd = load_state_dict(fixture("prefixed.pt"), o);
  CHECK(sd.tensors.front().name == "conv1.weight");
  for (const auto& t : sd.tensors) CHECK(t.name.find("module.") == std::string::npos);
}

TEST_CASE("files that are not checkpoints get a clear error", "[load][fixtures]") {
  write_file(scratch("empty.pt"), "");
  write_file(scratch("text.pt"), "hello, world\n");
  ::unlink(scratch("dangling.pt").c_str());
  ::symlink("/nonexistent/target.pt", scratch("dangling.pt").c_str());
  ::unlink(scratch("loop.pt").c_str());
  ::symlink(scratch("loop.pt").c_str(), scratch("loop.pt").c_str());
  ::unlink(scratch("fifo.pt").c_str());
  ::mkfifo(scratch("fifo.pt").c_str(), 0644);
  struct bad_case {
    std::string path;
    exit_code code;
    const char* message;
  };
  const bad_case cases[] = {
      {scratch("empty.pt"), exit_code::bad_input, "empty file"},
      {scratch("text.pt"), exit_code::bad_input, "not a PyTorch checkpoint"},
      {scratch("missing.pt"), exit_code::io, "No such file or directory"},
      {scratch("dangling.pt"), exit_code::io, "dangling symbolic link"},
      {scratch("loop.pt"), exit_code::io, "symbolic links"},
      {scratch("fifo.pt"), exit_code::bad_input, "a FIFO"},
      {std::string(SWAVG_FIXTURES_DIR), exit_code::bad_input, "a folder without a checkpoint"},
      {fixture("hostile/legacy_bad_magic.pt"), exit_code::bad_input, "expected the legacy format's magic number"},
  };
  for (const auto& c : cases) {
    INFO(c.path);
    try {
      load_state_dict(c.path);
      FAIL("no error");
    } catch (const error& e) {
      CHECK(e.code() == c.code);
      CHECK_THAT(e.what(), Catch::Contains(c.message) && Catch::Contains(c.path));
    }
  }
}
