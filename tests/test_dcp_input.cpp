// DCP folders (formats/dcp/dcp_input.h) as torch writes them: every tensor's bytes against torch's own
// consolidation (dcp_to_torch_save, CRC-32s in the fixture manifests), --key, the non-tensor
// entries carried, and the hostile folders (the malformed-input suite's dcp_*) refused as input errors.
#include <catch2/catch.hpp>

#include <string>

#include "formats/dcp/dcp_input.h"
#include "formats/dcp/dcp_output.h"
#include "formats/io/worker_files.h"
#include "support.h"
#include "util/crc32.h"
#include "util/error.h"
#include "util/mapped_file.h"

using namespace swavg;

namespace {

std::string folder(const std::string& name) { return test::fixture("dcp/" + name); }

// Checks every tensor of `sd` against the manifest's entry `prefix` + name; returns how many.
size_t check_against_torch(const state_dict& sd, const nlohmann::json& manifest, const std::string& prefix) {
  size_t n = 0;
  for (const auto& t : sd.tensors) {
    INFO(t.name);
    const nlohmann::json* want = nullptr;
    for (const auto& e : manifest["entries"])
      if (e["fqn"].get<std::string>() == prefix + t.name) want = &e;
    REQUIRE(want);
    CHECK(dtype_name(t.view.type) == (*want)["dtype"].get<std::string>());
    CHECK(t.view.shape == (*want)["size"].get<std::vector<int64_t>>());
    const std::string bytes = test::row_major_bytes(t.view);
    CHECK(crc32_update(0, bytes.data(), bytes.size()) == (*want)["crc32"].get<uint32_t>());
    // one chunk: a view into its .distcp; several: a pieced view of them, assembled when read
    CHECK((t.view.mapping != nullptr) == ((*want)["chunks"].size() == 1));
    CHECK((t.view.pieces != nullptr) == ((*want)["chunks"].size() > 1));
    ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("DCP folders of 1, 2 and 4 ranks and FSDP2 read as torch consolidates them", "[dcp_input][fixtures]") {
  for (const char* name : {"run1_0", "rank2_0", "rank4_1", "fsdp2_0"}) {
    INFO(name);
    REQUIRE(is_dcp_folder(folder(name)));
    const nlohmann::json manifest = test::read_json(folder(name) + ".json");
    const state_dict sd = read_dcp_folder(folder(name), "");
    CHECK(sd.key == "model");
    CHECK(check_against_torch(sd, manifest, "model.") == (std::string(name) == "fsdp2_0" ? 4 : 6));
    if (std::string(name) != "fsdp2_0") {
      const state_dict opt = read_dcp_folder(folder(name), "optimizer");
      CHECK(opt.key == "optimizer");
      CHECK(check_against_torch(opt, manifest, "optimizer.") == 2);
      CHECK(opt.objects.size() == 3);  // param_groups.0.lr, .params, .betas
    }
  }
}

TEST_CASE("a flat DCP state dict keeps its non-tensor entries", "[dcp_input][fixtures]") {
  const state_dict sd = read_dcp_folder(folder("flat_0"), "");
  CHECK(sd.key.empty());
  CHECK(check_against_torch(sd, test::read_json(folder("flat_0") + ".json"), "") == 2);
  REQUIRE(sd.others.size() == 2);
  CHECK(sd.others[0].path == "epoch");
  CHECK(sd.others[0].value == "1");
  CHECK(sd.others[1].path == "note");
  CHECK(sd.others[1].value == "run 0");
  CHECK(sd.objects.size() == 2);
  CHECK(sd.document);
}

TEST_CASE("a --key that selects nothing is a usage error naming what is there", "[dcp_input][fixtures]") {
  CHECK_THROWS_AS(read_dcp_folder(folder("run1_0"), "nothing"), usage_error);
  CHECK_THROWS_WITH(read_dcp_folder(folder("run1_0"), "mode"), Catch::Contains("'model', 'optimizer', 'step'"));
  CHECK_THROWS_AS(read_dcp_folder(folder("run1_0"), "step"), usage_error);  // a value, no tensors under it
  CHECK_FALSE(is_dcp_folder(folder("run1_0") + "/.metadata"));
  CHECK_FALSE(is_dcp_folder(test::fixture("resnet18.pt")));
}

TEST_CASE("hostile DCP folders are input errors", "[dcp_input][fixtures]") {
  for (const char* name : {"overlap", "missing_chunk", "past_end", "offset_past_end", "dtype", "shape",
                           "off_allow_list", "payload", "chunk_payload", "escape"}) {
    INFO(name);
    CHECK_THROWS_AS(read_dcp_folder(test::fixture(std::string("hostile/dcp_") + name), ""), input_error);
  }
}

TEST_CASE("DCP chunks: the pages of each chunk's archive headers are released once read", "[dcp_input]") {
  // An 8 MiB tensor, then a 1-element one whose archive starts 8 MiB into the same rank file: its
  // headers lie far from the file's start, where only its own release reaches.
  test::temp_dir dir;
  constexpr int64_t kBig = int64_t{2} << 20;
  const std::vector<tensor_spec> specs = {{"big", dtype::float32, {kBig}, std::nullopt},
                                          {"small", dtype::float32, {1}, std::nullopt}};
  const dcp_plan plan = plan_dcp(specs, nullptr, dir.path());
  REQUIRE(plan.files == std::vector<std::string>{"__0_0.distcp"});
  {
    dcp_sink sink(dir.path(), plan, 0, 1, false);
    const std::vector<float> zeros(static_cast<size_t>(kBig) + 1, 0.0f);
    sink.write(reinterpret_cast<const char*>(zeros.data()), zeros.size() * 4);
    sink.commit();
  }
  write_index(dir.path(), plan.layout);
  REQUIRE(plan.tensors[1].chunks[0].offset > (uint64_t{8} << 20));
  const state_dict sd = read_dcp_folder(dir.path(), "");
  REQUIRE(sd.tensors.size() == 2);
  const mapped_file* file = sd.tensors[1].view.mapping;
  REQUIRE(file != nullptr);
  CHECK(test::resident_bytes_of_mapping(file->data()) == 0);
  CHECK(test::row_major_bytes(sd.tensors[1].view) == std::string(4, '\0'));
}
