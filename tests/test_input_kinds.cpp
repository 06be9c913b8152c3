// The input table's conformance, one test over every row (as Arrow's FileFormatFixtureMixin): each
// row claims its own fixture and no other row does; a read opens exactly the files the row's
// files() names (watched with inotify); a truncated copy is an input_error naming the path; no row
// claims an empty file or an empty folder. Fixtures are copies of scripts/make_fixtures.py's, in a
// temporary folder; the Megatron-core one is a DCP folder with the metadata.json megatron-core
// writes today (no common.pt: the common state is among the DCP items since Megatron-LM#5160).
#include <sys/inotify.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "formats/io/input_kinds.h"
#include "formats/io/load.h"
#include "support.h"
#include "util/error.h"

using namespace swavg;
namespace fs = std::filesystem;

namespace {

struct kind_fixture {
  input_kind kind;
  std::string source;    // under the fixtures folder
  std::string argument;  // the path given, under the copy ("" for the copy itself)
  std::string truncate;  // the file cut in half for the truncated copy, under the copy ("" for the copy)
};

const std::vector<kind_fixture> kFixtures = {
    {input_kind::torch, "dtypes.pt", "", ""},
    {input_kind::torch_legacy, "legacy/plain.pt", "", ""},
    {input_kind::torchscript, "scripted.ts", "", ""},
    {input_kind::export_program, "export/small.pt2", "", ""},
    {input_kind::safetensors, "st_mixed.safetensors", "", ""},
    {input_kind::hf, "hf_stack/llama/st/run_0", "model.safetensors.index.json", "model-00002-of-00003.safetensors"},
    {input_kind::dcp, "dcp/flat_0", "", "__0_0.distcp"},
    {input_kind::deepspeed, "deepspeed/zero3_w2", "", "global_step3/zero_pp_rank_1_mp_rank_00_optim_states.pt"},
    {input_kind::megatron, "dcp/flat_0", "", "__0_0.distcp"},
};

struct copied {
  test::temp_dir dir;
  std::string root;  // the copy
  std::string argument;
};

// Copies the fixture into a folder of its own; the Megatron-core one gains its metadata.json.
std::unique_ptr<copied> copy_of(const kind_fixture& f) {
  auto c = std::make_unique<copied>();
  c->root = c->dir / ("input_" + std::string(input_kind_name(f.kind)) + fs::path(f.source).extension().string());
  fs::copy(test::fixture(f.source), c->root, fs::copy_options::recursive);
  if (f.kind == input_kind::megatron)
    std::ofstream(c->root + "/metadata.json") << R"({"sharded_backend": "torch_dist", "sharded_backend_version": 1})";
  c->argument = f.argument.empty() ? c->root : c->root + "/" + f.argument;
  return c;
}

std::vector<input_kind> claimants(const std::string& path) {
  const input_probe probe = probe_input(path);
  std::vector<input_kind> kinds;
  for (const input_row& row : input_rows())
    if (row.claims(probe)) kinds.push_back(row.kind);
  return kinds;
}

// Every file opened under `root` while `run` runs (folders left out).
template <typename F>
std::set<std::string> files_opened(const std::string& root, F run) {
  const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  REQUIRE(fd >= 0);
  std::map<int, std::string> dirs;
  const auto watch = [&](const std::string& dir) { dirs[::inotify_add_watch(fd, dir.c_str(), IN_OPEN)] = dir; };
  if (fs::is_directory(root)) {
    watch(root);
    for (const auto& e : fs::recursive_directory_iterator(root))
      if (e.is_directory()) watch(e.path().string());
  } else {
    watch(fs::path(root).parent_path().string());
  }
  run();
  std::set<std::string> opened;
  alignas(inotify_event) char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) {
    for (char* p = buf; p < buf + n;) {
      const auto* e = reinterpret_cast<const inotify_event*>(p);
      if (!(e->mask & IN_ISDIR) && e->len > 0) opened.insert(fs::canonical(dirs[e->wd] + "/" + e->name).string());
      p += sizeof(inotify_event) + e->len;
    }
  }
  ::close(fd);
  return opened;
}

std::set<std::string> canonical(const std::vector<std::string>& paths) {
  std::set<std::string> out;
  for (const auto& p : paths) out.insert(fs::canonical(p).string());
  return out;
}

bool is_refused(input_kind k) { return k == input_kind::megatron; }

}  // namespace

TEST_CASE("input table: one row per kind, each named once, in probe order", "[input_kinds]") {
  const std::vector<input_kind> all = {
      input_kind::torch,       input_kind::torch_legacy, input_kind::torchscript, input_kind::export_program,
      input_kind::safetensors, input_kind::hf,           input_kind::dcp,         input_kind::deepspeed,
      input_kind::megatron};
  REQUIRE(input_rows().size() == all.size());
  std::set<std::string> names;
  for (const input_kind k : all) {
    CHECK(input_row_of(k).kind == k);
    names.insert(input_kind_name(k));
    CHECK(std::string(input_kind_description(k)).rfind("a ", 0) == 0);
  }
  CHECK(names == std::set<std::string>{"torch", "torch-legacy", "torchscript", "export", "safetensors", "hf", "dcp",
                                       "deepspeed", "megatron"});
  // A Megatron-core torch_dist folder is a DCP folder too: its row comes first.
  CHECK(input_rows().front().kind == input_kind::megatron);
}

TEST_CASE("input table: each row claims its own fixture and no other row does", "[input_kinds][fixtures]") {
  for (const auto& f : kFixtures) {
    SECTION(input_kind_name(f.kind)) {
      const auto c = copy_of(f);
      CHECK(claimants(c->argument) == std::vector<input_kind>{f.kind});
      CHECK(detect_input_kind(c->argument) == f.kind);
      if (f.kind == input_kind::hf) CHECK(claimants(c->root) == std::vector<input_kind>{input_kind::hf});
      if (!is_refused(f.kind)) CHECK(load_state_dict(c->argument).kind == f.kind);
    }
  }
}

TEST_CASE("input table: a read opens the files the row names, no other", "[input_kinds][fixtures]") {
  for (const auto& f : kFixtures) {
    SECTION(input_kind_name(f.kind)) {
      const auto c = copy_of(f);
      const input_row& row = input_row_of(f.kind);
      if (is_refused(f.kind)) {
        CHECK_THROWS_AS(load_state_dict(c->argument), input_error);
        CHECK_THROWS_WITH(row.files(c->argument), Catch::Contains(c->argument));
        // Refused, it reads its claim's metadata.json only.
        const auto opened = files_opened(c->root, [&] { CHECK_THROWS_AS(load_state_dict(c->argument), input_error); });
        CHECK(opened == canonical({c->root + "/metadata.json"}));
        continue;
      }
      const std::set<std::string> named = canonical(row.files(c->argument));
      const std::set<std::string> opened = files_opened(c->root, [&] { load_state_dict(c->argument); });
      CHECK(opened == named);
      CHECK(canonical(checkpoint_files(c->argument)) == named);
      const input_row* by_path = claim_by_path(c->argument);
      CHECK((by_path ? by_path->kind : f.kind) == f.kind);
      CHECK((by_path == nullptr) == row.weight_file);
    }
  }
}

TEST_CASE("input table: a truncated copy is an input error naming the path", "[input_kinds][fixtures]") {
  for (const auto& f : kFixtures) {
    SECTION(input_kind_name(f.kind)) {
      const auto c = copy_of(f);
      const std::string cut = f.truncate.empty() ? c->root : c->root + "/" + f.truncate;
      fs::resize_file(cut, fs::file_size(cut) / 2);
      CHECK_THROWS_AS(load_state_dict(c->argument), input_error);
      // The message names the argument, or the file in it that was cut.
      CHECK_THROWS_WITH(load_state_dict(c->argument), Catch::Contains(c->root));
    }
  }
}

TEST_CASE("input table: no row claims an empty file or an empty folder", "[input_kinds]") {
  test::temp_dir dir;
  const std::string file = dir / "empty", folder = dir / "empty_folder";
  std::ofstream(file).close();
  fs::create_directory(folder);
  for (const std::string& path : {file, folder}) {
    INFO(path);
    CHECK(claimants(path).empty());
    CHECK_THROWS_AS(load_state_dict(path), input_error);
    CHECK_THROWS_WITH(load_state_dict(path),
                      Catch::Contains(path + ": ") && (Catch::Contains("empty file, expected a checkpoint") ||
                                                       Catch::Contains("a folder without a checkpoint")));
  }
}
