// The output folder's protocol: which files of a source folder are copied, and its steps in order.
#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "formats/hf/sharded_output.h"
#include "formats/io/output_folder.h"
#include "support.h"
#include "util/atomic_dir.h"
#include "util/error.h"
#include "util/sha256.h"

using namespace swavg;

TEST_CASE("folder files: weights, indexes and folders are not copied, symlinks are followed", "[output_folder]") {
  const std::string dir = "classify_case";
  remove_tree(dir);
  ::mkdir(dir.c_str(), 0755);
  ::mkdir((dir + "/sub").c_str(), 0755);
  for (const char* name :
       {"config.json", "tokenizer.json", "README.md", "model-00001-of-00002.safetensors", "pytorch_model.bin",
        "model.safetensors.index.json", "x.pt", "x.pth", "x.ckpt", "tf_model.h5", "flax_model.msgpack", "m.gguf",
        "m.onnx", "blob", ".metadata", "__0_0.distcp", "metadata"})
    std::ofstream(dir + "/" + name) << name;
  REQUIRE(::symlink("blob", (dir + "/generation_config.json").c_str()) == 0);
  REQUIRE(::symlink("missing", (dir + "/dangling.txt").c_str()) == 0);
  const folder_files f = classify_folder(dir);
  CHECK(f.copied == std::vector<std::string>{"README.md", "blob", "config.json", "generation_config.json", "metadata",
                                             "tokenizer.json"});
  CHECK(f.skipped.size() == 14);  // 12 weights (a DCP .metadata and rank file), the folder, the dangling link
  const written_file w = copy_file_hashed(dir + "/generation_config.json", dir + "/sub/copy", "copy");
  CHECK(w.size == 4);
  CHECK(w.sha256 == sha256_file(dir + "/blob"));
  remove_tree(dir);
  struct stat st {};
  CHECK(::stat(dir.c_str(), &st) != 0);
}

TEST_CASE("output_folder's steps out of order are internal errors, never a null dereference", "[output_folder]") {
  const std::string dir = "steps_case";
  remove_tree(dir);
  output_folder out(dir + "/", 0, 1, false);
  const auto code_of = [](const std::function<void()>& f) {
    exit_code code = exit_code::ok;
    const std::string message = test::error_of(f, &code);
    CAPTURE(message);
    CHECK(message.find("output_folder::") != std::string::npos);
    return code;
  };
  CHECK(code_of([&] { out.plan_shards({test::byte_spec("a", 4)}, {}); }) == exit_code::internal);  // no format yet
  CHECK(code_of([&] { out.open({test::byte_spec("a", 4)}, {}); }) == exit_code::internal);         // not staged
  CHECK(code_of([&] { out.finish(); }) == exit_code::internal);                                    // not open
  out.use(std::make_unique<hf_folder_writer>(hf_writer_options{dir, output_format::safetensors, 100, {}, ""}));
  CHECK(code_of([&] { out.open({test::byte_spec("a", 4)}, {}); }) == exit_code::internal);  // still not staged
  out.stage("", {});
  CHECK(code_of([&] { out.stage("", {}); }) == exit_code::internal);  // twice
  output_sink& sink = out.open({test::byte_spec("a", 4)}, {});
  CHECK(code_of([&] { out.open({test::byte_spec("a", 4)}, {}); }) == exit_code::internal);  // twice
  const char bytes[4] = {1, 2, 3, 4};
  sink.write(bytes, 4);
  sink.commit();
  out.finish();
  CHECK(list_dir(dir) == std::vector<std::string>{"model.safetensors"});
  CHECK(code_of([&] { out.finish(); }) == exit_code::internal);  // twice
  remove_tree(dir);
}
