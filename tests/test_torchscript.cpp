// The TorchScript reader (formats/torch/torchscript.cpp) against PyTorch: for each archive the fixture
// script wrote (scripted and traced torchvision models, tied and shared submodules, every kind of
// attribute, the BatchNorm fixtures), the same names in the same order, the same parameter/buffer
// split, dtypes, shapes, strides and bytes as torch.jit.load(f).state_dict() in Python and as
// LibTorch's own jit loader here. Plus the class scanner's edge cases and the nesting bound.
// LibTorch first: its logging defines CHECK, which Catch2 must define over.
#include "libtorch/module.h"
// clang-format off
#include <catch2/catch.hpp>
// clang-format on

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "formats/torch/torchscript.h"
#include "formats/zip/zip_reader.h"
#include "support.h"
#include "util/crc32.h"
#include "util/error.h"
#include "util/mapped_file.h"

using namespace swavg;
using test::fixture;

namespace {

uint32_t crc_of(const tensor_view& v) {
  const std::string bytes = test::row_major_bytes(v);
  return crc32_update(0, bytes.data(), bytes.size());
}

std::vector<nlohmann::json> all_cases() {
  auto j = test::read_json(fixture("torchscript/cases.json"));
  return {j.begin(), j.end()};
}

}  // namespace

TEST_CASE("TorchScript archives read as PyTorch reads them", "[torchscript][fixtures]") {
  const auto cases = all_cases();
  REQUIRE(cases.size() >= 7);
  std::set<std::string> names;
  for (const auto& c : cases) names.insert(c["name"].get<std::string>());
  for (const char* required : {"resnet18_scripted", "resnet18_traced", "mobilenet_v2_scripted", "mobilenet_v2_traced",
                               "tied", "tied_traced", "mixed", "bn_cnn_scripted", "bn_cnn_traced"})
    CHECK(names.count(required) == 1);
  for (const auto& c : cases) {
    INFO(c["name"].get<std::string>());
    {
      const state_dict sd = read_torchscript(fixture(c["archive"].get<std::string>()));
      const auto ref = test::read_json(fixture(c["reference"].get<std::string>()));
      const auto& want = ref["tensors"];
      CHECK(sd.format == file_format::torchscript);
      REQUIRE(sd.tensors.size() == want.size());
      std::set<std::string> parameters, buffers;
      for (size_t i = 0; i < want.size(); ++i) {
        const auto& t = sd.tensors[i];
        INFO(t.name);
        CHECK(t.name == want[i]["name"].get<std::string>());
        CHECK(kind_name(t.kind) == want[i]["kind"].get<std::string>());
        CHECK(dtype_name(t.view.type) == want[i]["dtype"].get<std::string>());
        CHECK(t.view.shape == want[i]["shape"].get<std::vector<int64_t>>());
        CHECK(t.view.strides == want[i]["stride"].get<std::vector<int64_t>>());
        CHECK(t.view.offset == want[i]["storage_offset"].get<int64_t>());
        CHECK(crc_of(t.view) == want[i]["crc32"].get<uint32_t>());
        (t.kind == tensor_kind::parameter ? parameters : buffers).insert(t.name);
      }
      // named_parameters()/named_buffers() drop tensors met twice; each name they give has our kind.
      for (const auto& n : ref["named_parameters"]) CHECK(parameters.count(n.get<std::string>()) == 1);
      for (const auto& n : ref["named_buffers"]) CHECK(buffers.count(n.get<std::string>()) == 1);
    }
  }
}

TEST_CASE("TorchScript archives read as LibTorch's jit loader reads them", "[torchscript][libtorch][fixtures]") {
  for (const auto& c : all_cases()) {
    INFO(c["name"].get<std::string>());
    {
      const std::string path = fixture(c["archive"].get<std::string>());
      const state_dict sd = read_torchscript(path);
      const auto module = load_module(path);
      const std::vector<named_tensor> want = module_state(*module);
      REQUIRE(sd.tensors.size() == want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        INFO(want[i].name);
        CHECK(sd.tensors[i].name == want[i].name);
        CHECK(sd.tensors[i].kind == want[i].kind);
        CHECK(sd.tensors[i].view.type == want[i].view.type);
        CHECK(sd.tensors[i].view.shape == want[i].view.shape);
        CHECK(test::row_major_bytes(sd.tensors[i].view) == test::row_major_bytes(want[i].view));
      }
    }
  }
}

TEST_CASE("Module nesting: the bound is read, one past it refused", "[torchscript][limits][fixtures]") {
  const state_dict ok = read_torchscript(fixture(fmt::format("torchscript/nested_{}.ts", kMaxTorchScriptDepth)));
  REQUIRE(ok.tensors.size() == 1);
  std::string name;
  for (int i = 0; i < kMaxTorchScriptDepth; ++i) name += "m.";
  CHECK(ok.tensors[0].name == name + "w");
  CHECK(ok.tensors[0].kind == tensor_kind::parameter);
  CHECK_THROWS_WITH(read_torchscript(fixture(fmt::format("torchscript/nested_{}.ts", kMaxTorchScriptDepth + 1))),
                    Catch::Contains(fmt::format("is nested {} modules deep; swavg reads at most {}",
                                                kMaxTorchScriptDepth + 1, kMaxTorchScriptDepth)));
}

TEST_CASE("Class scanner: declarations as torch.jit.save prints them", "[torchscript][scanner]") {
  const auto classes = scan_torchscript_classes("__torch__.m",
                                                "class A(Module):\n"
                                                "  __parameters__ = [\"weight\", \"bias\", ]\n"
                                                "  __buffers__ = [\"running_mean\", ]\n"
                                                "  weight : Tensor\n"
                                                "  def forward(self: __torch__.m.A) -> Tensor:\n"
                                                "    __parameters__ = [\"not\", ]\n"
                                                "    return self.weight\n"
                                                "def helper(x: int) -> int:\n"
                                                "  __buffers__ = [\"not\", ]\n"
                                                "  return x\n"
                                                "class B(Module):\n"
                                                "  __parameters__ = []\n"
                                                "  __buffers__ = [\n"
                                                "    '0', \"1\"\n"
                                                "  ]\n"
                                                "  def __setstate__(self: __torch__.m.B, s: int) -> NoneType:\n"
                                                "    return None\n"
                                                "class C(Object):\n"
                                                "  x : int\n",
                                                "test");
  REQUIRE(classes.size() == 3);
  const auto& a = classes.at("__torch__.m.A");
  CHECK(a.is_module);
  CHECK(a.parameters == std::vector<std::string>({"weight", "bias"}));
  CHECK(a.buffers == std::vector<std::string>({"running_mean"}));
  CHECK_FALSE(a.has_setstate);
  const auto& b = classes.at("__torch__.m.B");
  CHECK(b.parameters.empty());
  CHECK(b.has_parameters);
  CHECK(b.buffers == std::vector<std::string>({"0", "1"}));
  CHECK(b.has_setstate);
  const auto& c = classes.at("__torch__.m.C");
  CHECK_FALSE(c.is_module);
  CHECK_FALSE(c.has_parameters);
}

TEST_CASE("Class scanner: what it cannot read is an input_error", "[torchscript][scanner]") {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"class A(Module):\n  __parameters__ = [\"w\", \n", "has no closing ']'"},
      {"class A(Module):\n  __parameters__ = [\"w, ]\n", "has no closing quote"},
      {"class A(Module):\n  __parameters__ = [\"w\" \"b\"]\n", "unexpected '\"b\"]'"},
      {"class A(Module):\n  __parameters__ = [, ]\n", "unexpected ', ]'"},
      {"class A(Module):\n  __parameters__ = \"w\"\n", "expected a list of names"},
      {"class A(Module):\n  __parameters__ = [\"w\\\"\"]\n", "has an escape"},
      {"class A(Module):\n  __parameters__ = []\n  __parameters__ = []\n", "is declared twice"},
      {"class A(Module):\n  x : int\nclass A(Module):\n  y : int\n", "class '__torch__.A' is defined twice"},
      {"class (Module):\n", "a class statement without a name"},
  };
  for (const auto& [source, message] : bad) {
    INFO(source);
    CHECK_THROWS_AS(scan_torchscript_classes("__torch__", source, "code.py"), input_error);
    CHECK_THROWS_WITH(scan_torchscript_classes("__torch__", source, "code.py"), Catch::Contains(message));
  }
}

TEST_CASE("Code records: the per-record and total bounds, at the last valid and first invalid value",
          "[torchscript][limits][fixtures]") {
  // tied.ts reads two code records: the root's class and Linear's.
  const std::string path = fixture("torchscript/tied.ts");
  auto file = mapped_file::open(path);
  const zip_reader zip = read_zip(*file);
  uint64_t largest = 0, total = 0;
  int records = 0;
  for (const auto& e : zip.entries()) {
    if (e.name.find("/code/") == std::string::npos || e.name.size() < 3 ||
        e.name.compare(e.name.size() - 3, 3, ".py") != 0)
      continue;
    largest = std::max(largest, e.size);
    total += e.size;
    ++records;
  }
  REQUIRE(records == 2);
  torchscript_limits limits;
  limits.max_code_record = largest;
  limits.max_code_total = total;
  CHECK(read_torchscript(file, limits).tensors.size() == 6);
  limits.max_code_record = largest - 1;
  CHECK_THROWS_WITH(
      read_torchscript(file, limits),
      Catch::Contains(fmt::format("declares {} bytes; swavg reads code records of at most {}", largest, largest - 1)));
  limits.max_code_record = largest;
  limits.max_code_total = total - 1;
  CHECK_THROWS_WITH(read_torchscript(file, limits),
                    Catch::Contains(fmt::format("takes the code read past {} bytes in all", total - 1)));
  // The proportional budget: code_per_input_byte x the file's size + code_base, at its edge.
  limits = torchscript_limits{};
  limits.code_per_input_byte = 0;
  limits.code_base = total;
  CHECK(read_torchscript(file, limits).tensors.size() == 6);
  limits.code_base = total - 1;
  CHECK_THROWS_WITH(read_torchscript(file, limits),
                    Catch::Contains(fmt::format("takes the code read past {} bytes in all", total - 1)));
  // The file's size scales the budget; an overflowing product falls back to the absolute cap.
  limits.code_base = 0;
  limits.code_per_input_byte = (total + file->size() - 1) / file->size();
  CHECK(read_torchscript(file, limits).tensors.size() == 6);
  limits.code_per_input_byte = uint64_t{1} << 63;
  CHECK(read_torchscript(file, limits).tensors.size() == 6);
  limits.max_code_total = total - 1;
  CHECK_THROWS_WITH(read_torchscript(file, limits), Catch::Contains("at most " + std::to_string(total - 1)));
  limits = torchscript_limits{};
  limits.max_depth = 0;  // the root alone
  CHECK_THROWS_WITH(read_torchscript(file, limits), Catch::Contains("module 'a' is nested 1 modules deep"));
}
