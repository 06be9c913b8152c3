/*
 * A main() for the fuzz targets where libFuzzer is not linked (gcc, sanitizer builds): runs the
 * target once on each file given, and on each file inside each folder given (recursively). Arguments
 * starting with '-' are ignored, so the command line of a libFuzzer replay (`-runs=0 DIR...`) works
 * for both. A crash aborts the process; otherwise prints how many inputs ran and exits 0.
 */
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

constexpr uintmax_t kMaxInput = 16u << 20;  // larger files are skipped (the suite's are small)

bool run_file(const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec) || std::filesystem::file_size(p, ec) > kMaxInput) return false;
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // An exactly sized heap copy, so AddressSanitizer catches a read one past the end.
  std::vector<uint8_t> exact(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(exact.empty() ? nullptr : exact.data(), exact.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  size_t ran = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-') continue;
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::filesystem::path> files;
      for (auto it = std::filesystem::recursive_directory_iterator(
               arg, std::filesystem::directory_options::skip_permission_denied, ec);
           !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
        if (!it->is_symlink(ec)) files.push_back(it->path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) ran += run_file(f);
    } else if (!run_file(arg)) {
      std::fprintf(stderr, "%s: not a readable regular file\n", arg.c_str());
      return 2;
    } else {
      ++ran;
    }
  }
  std::printf("%s: ran %zu inputs, no crash\n", argv[0], ran);
  return 0;
}
