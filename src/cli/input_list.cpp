#include "cli/input_list.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <climits>

#include <algorithm>
#include <iostream>
#include <memory>
#include <sstream>

#include "util/error.h"
#include "util/read_file.h"

namespace swavg {
namespace {

std::unique_ptr<std::vector<std::string>>& stdin_list() {
  static std::unique_ptr<std::vector<std::string>> list;
  return list;
}

std::string read_stdin(uint64_t max_size) {
  std::string text;
  char buf[65536];
  while (std::cin.read(buf, sizeof buf) || std::cin.gcount() > 0) {
    text.append(buf, static_cast<size_t>(std::cin.gcount()));
    if (text.size() > max_size)
      throw input_error(fmt::format("--inputs-from -: stdin holds more than {} bytes", max_size));
  }
  if (std::cin.bad()) throw io_error("--inputs-from -: cannot read stdin");
  return text;
}

std::vector<std::string> read_lines(std::istream& in) {
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos || line[start] == '#') continue;
    lines.push_back(line.substr(start));
  }
  return lines;
}

}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && a[i2] == '0') ++i2;
      while (j2 < b.size() && b[j2] == '0') ++j2;
      size_t ie = i2, je = j2;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      if (ie - i2 != je - j2) return ie - i2 < je - j2;
      int c = a.compare(i2, ie - i2, b, j2, je - j2);
      if (c != 0) return c < 0;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

const std::vector<std::string>* stdin_inputs() { return stdin_list().get(); }

std::vector<std::string> select_inputs(const input_selection& s) {
  if (s.every < 1) throw usage_error(fmt::format("--every: expected an integer in [1, {}], got {}", INT_MAX, s.every));
  if (s.last < 0) throw usage_error(fmt::format("--last: expected an integer in [1, {}], got {}", INT_MAX, s.last));
  std::vector<std::string> paths = s.paths;
  if (!s.inputs_from.empty()) {
    std::vector<std::string> listed;
    if (s.inputs_from == "-") {
      std::istringstream in(read_stdin(kMaxInputListBytes));
      listed = read_lines(in);
      stdin_list() = std::make_unique<std::vector<std::string>>(listed);
    } else {
      std::istringstream in(read_text_file(s.inputs_from, kMaxInputListBytes, open_mode::streams_too));
      listed = read_lines(in);
    }
    paths.insert(paths.end(), listed.begin(), listed.end());
  }
  if (s.sort == sort_order::name) {
    std::stable_sort(paths.begin(), paths.end());
  } else if (s.sort == sort_order::natural) {
    std::stable_sort(paths.begin(), paths.end(), natural_less);
  } else if (s.sort == sort_order::mtime) {
    std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> keyed;
    for (const auto& p : paths) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0) throw io_error(p + ": cannot stat for --sort mtime");
      keyed.push_back({{st.st_mtim.tv_sec, st.st_mtim.tv_nsec}, p});
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    paths.clear();
    for (auto& k : keyed) paths.push_back(std::move(k.second));
  }
  if (s.every > 1) {
    std::vector<std::string> kept;
    for (size_t i = static_cast<size_t>(s.every) - 1; i < paths.size(); i += static_cast<size_t>(s.every))
      kept.push_back(paths[i]);
    paths = std::move(kept);
  }
  if (s.last > 0 && paths.size() > static_cast<size_t>(s.last)) paths.erase(paths.begin(), paths.end() - s.last);
  if (paths.empty()) throw usage_error("no input checkpoints given");
  return paths;
}

}  // namespace swavg
