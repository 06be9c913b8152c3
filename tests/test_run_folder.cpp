// A training run's folder as swavg watch sees it (formats/io/run_folder.h): which entries are
// candidates, their signatures, and whether each is whole, on real checkpoints cut short or
// without the file their writer puts last (a Trainer's trainer_state.json, DCP's .metadata).
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "formats/io/run_folder.h"
#include "support.h"

using namespace swavg;
using swavg::test::temp_dir;
namespace fs = std::filesystem;

namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

std::vector<std::string> names(const std::vector<run_entry>& entries) {
  std::vector<std::string> n;
  for (const auto& e : entries) n.push_back(e.name);
  return n;
}

void copy_cut(const std::string& from, const std::string& to, uintmax_t keep) {
  fs::copy_file(from, to, fs::copy_options::overwrite_existing);
  fs::resize_file(to, keep);
}

}  // namespace

TEST_CASE("run folder: candidates are checkpoint files and folders, never temporary names", "[run_folder][unit]") {
  temp_dir d;
  for (const char* f :
       {"ckpt_1.pt", "ckpt_2.safetensors", "model.bin", "epoch=1.ckpt", "checkpoint-3.pth.tar", "ckpt_4.pt.tmp",
        ".ckpt_5.pt", "ckpt_6.pt.partial", "ckpt_7.pt~", "tmp_8.pt", "notes.txt", "metrics.csv", "trainer_state.json"})
    write(d / f, "x");
  for (const char* f : {"checkpoint-10", "tmp-checkpoint-11", ".checkpoint-12.tmp", "lightning_logs", "runs"})
    fs::create_directory(d / f);
  write(d / "runs/events.out", "x");
  const auto entries = list_run_folder(d.path(), "");
  CHECK(names(entries) == std::vector<std::string>{"checkpoint-10", "checkpoint-3.pth.tar", "ckpt_1.pt",
                                                   "ckpt_2.safetensors", "epoch=1.ckpt", "model.bin"});
  CHECK(entries.front().folder);
  CHECK(entries.front().path == d / "checkpoint-10");
  CHECK(names(list_run_folder(d.path() + "/", "ckpt_*")) ==
        std::vector<std::string>{"ckpt_1.pt", "ckpt_2.safetensors"});
  CHECK(list_run_folder(d.path() + "/", "ckpt_*").front().path == d / "ckpt_1.pt");
  CHECK_THROWS_AS(list_run_folder(d / "missing", ""), io_error);
}

TEST_CASE("run folder: the bounds on entries and on a checkpoint's files, at their edges", "[run_folder][unit]") {
  temp_dir d;
  for (const char* f : {"ckpt_1.pt", "ckpt_2.pt", "ckpt_3.pt", ".hidden.pt", "notes.txt"}) write(d / f, "x");
  CHECK(list_run_folder(d.path(), "", 3).size() == 3);  // the names it passes over do not count
  CHECK_THROWS_WITH(list_run_folder(d.path(), "", 2), Catch::Contains("more than 2 checkpoints"));
  fs::create_directory(d / "checkpoint-4");
  write(d / "checkpoint-4/a", "x");
  write(d / "checkpoint-4/b", "x");
  CHECK(!snapshot_entry(d / "checkpoint-4", 3).signature.empty());  // the folder and its two files
  CHECK_THROWS_AS(snapshot_entry(d / "checkpoint-4", 2), input_error);
}

TEST_CASE("run folder: a signature changes with every write and is empty once gone", "[run_folder][unit]") {
  temp_dir d;
  fs::create_directory(d / "checkpoint-1");
  write(d / "checkpoint-1/model.safetensors", "abc");
  const entry_snapshot a = snapshot_entry(d / "checkpoint-1");
  CHECK(!a.signature.empty());
  CHECK(a.age >= 0);
  CHECK(snapshot_entry(d / "checkpoint-1").signature == a.signature);
  write(d / "checkpoint-1/trainer_state.json", "{}");
  const entry_snapshot b = snapshot_entry(d / "checkpoint-1");
  CHECK(b.signature != a.signature);
  std::ofstream(d / "checkpoint-1/model.safetensors", std::ios::app) << "d";
  CHECK(snapshot_entry(d / "checkpoint-1").signature != b.signature);
  fs::remove_all(d / "checkpoint-1");
  CHECK(snapshot_entry(d / "checkpoint-1").signature.empty());
  // A file last written long ago is old at first sight: a restarted watcher need not wait to settle it.
  write(d / "old.pt", "x");
  struct timespec times[2] = {{0, UTIME_OMIT}, {1000, 0}};
  REQUIRE(::utimensat(AT_FDCWD, (d / "old.pt").c_str(), times, 0) == 0);
  CHECK(snapshot_entry(d / "old.pt").age > 1e9);
}

TEST_CASE("run folder: a checkpoint cut short is not whole, the whole one is", "[run_folder][fixtures]") {
  temp_dir d;
  for (const char* name : {"training.pt", "st_mixed.safetensors", "legacy.pt"}) {
    const std::string from = swavg::test::fixture(name);
    const uintmax_t size = fs::file_size(from);
    CHECK(check_whole(from, {}).whole);
    for (uintmax_t keep : {uintmax_t{0}, uintmax_t{9}, size / 2, size - 1}) {
      INFO(name << " cut to " << keep);
      copy_cut(from, d / name, keep);
      const entry_readiness r = check_whole(d / name, {});
      CHECK(!r.whole);
      CHECK(!r.waiting.empty());
    }
  }
}

TEST_CASE("run folder: a Trainer folder waits for trainer_state.json, a DCP folder for .metadata",
          "[run_folder][fixtures]") {
  temp_dir d;
  const std::string trainer = d / "checkpoint-4";
  fs::copy(swavg::test::fixture("trainer_runs/hf/checkpoint-4"), trainer);
  REQUIRE(check_whole(trainer, {}).whole);
  const std::string state = trainer + "/trainer_state.json";
  const std::string text = read(state);
  fs::remove(state);
  CHECK_THAT(check_whole(trainer, {}).waiting, Catch::Contains("trainer_state.json, which the Trainer writes last"));
  write(state, text.substr(0, text.size() / 2));  // being written
  CHECK_THAT(check_whole(trainer, {}).waiting, Catch::Contains("trainer_state.json to be whole"));
  write(state, text);
  CHECK(check_whole(trainer, {}).whole);
  // The weights of a Trainer folder are read through too: cut short, it is not whole.
  copy_cut(swavg::test::fixture("trainer_runs/hf/checkpoint-4/model.safetensors"), trainer + "/model.safetensors", 100);
  CHECK(!check_whole(trainer, {}).whole);

  const std::string dcp = d / "step-1";
  fs::copy(swavg::test::fixture("dcp/flat_0"), dcp);
  REQUIRE(check_whole(dcp, {}).whole);
  fs::rename(dcp + "/.metadata", dcp + "/.metadata.tmp");  // DCP renames it into place last
  CHECK(!check_whole(dcp, {}).whole);
  CHECK(names(list_run_folder(d.path(), "")) ==
        std::vector<std::string>{"checkpoint-4", "step-1"});  // a step in its name
}
