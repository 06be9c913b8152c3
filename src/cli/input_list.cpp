#include "cli/input_list.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>

#include <algorithm>
#include <iostream>
#include <memory>

#include "util/error.h"
#include "util/printable.h"
#include "util/read_file.h"

namespace swavg {
namespace {

std::unique_ptr<std::string>& stdin_list() {
  static std::unique_ptr<std::string> list;
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

}  // namespace

const char* sort_order_name(sort_order s) {
  switch (s) {
    case sort_order::none: return "none";
    case sort_order::name: return "name";
    case sort_order::natural: return "natural";
    case sort_order::mtime: return "mtime";
    case sort_order::step: return "step";
  }
  return "?";
}

namespace {

// <0, 0 or >0 as `a` sorts before, with or after `b` in natural order.
int natural_compare(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      size_t i2 = i, j2 = j;
      while (i2 < a.size() && a[i2] == '0') ++i2;
      while (j2 < b.size() && b[j2] == '0') ++j2;
      size_t ie = i2, je = j2;
      while (ie < a.size() && std::isdigit(static_cast<unsigned char>(a[ie]))) ++ie;
      while (je < b.size() && std::isdigit(static_cast<unsigned char>(b[je]))) ++je;
      if (ie - i2 != je - j2) return ie - i2 < je - j2 ? -1 : 1;
      const int c = a.compare(i2, ie - i2, b, j2, je - j2);
      if (c != 0) return c;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[j]) ? -1 : 1;
      ++i;
      ++j;
    }
  }
  const size_t rest_a = a.size() - i, rest_b = b.size() - j;
  return rest_a == rest_b ? 0 : (rest_a < rest_b ? -1 : 1);
}

}  // namespace

bool natural_less(const std::string& a, const std::string& b) {
  const int c = natural_compare(a, b);
  return c != 0 ? c < 0 : a < b;
}

const std::string* stdin_inputs() { return stdin_list().get(); }

std::string fold_order_line(const std::vector<std::string>& inputs, const std::string& order) {
  if (inputs.empty()) return "folded no input";
  const std::string how = order == "natural" ? "natural (step) order"
                          : order == "step"  ? "the order of their recorded steps (--sort step)"
                          : order == "none"  ? "the order given (--sort none)"
                                             : fmt::format("{} order (--sort {})", order, order);
  if (inputs.size() == 1) return fmt::format("folded one input: {}", printable(inputs.front()));
  return fmt::format("folded in {}: first {}, last {}", how, printable(inputs.front()), printable(inputs.back()));
}

std::vector<std::string> parse_input_list(const std::string& text, const std::string& list_name, bool null_separated) {
  const char end = null_separated ? '\0' : '\n';
  std::vector<std::string> paths;
  size_t line = 0;
  for (size_t start = 0; start < text.size();) {
    ++line;
    const size_t stop = std::min(text.find(end, start), text.size());
    std::string path = text.substr(start, stop - start);
    start = stop + 1;
    if (!null_separated) {
      if (!path.empty() && path.back() == '\r') path.pop_back();
      const size_t nul = path.find('\0');
      if (nul != std::string::npos)
        throw usage_error(
            fmt::format("--inputs-from {}: line {} holds a NUL byte (at byte {} of the line), which no path can; for a "
                        "NUL-separated list (find -print0) add --null",
                        list_name, line, nul + 1));
    }
    if (!path.empty()) paths.push_back(std::move(path));
  }
  return paths;
}

std::vector<std::string> select_inputs(const input_selection& s) {
  std::vector<std::string> paths = s.paths;
  size_t listed_count = 0;
  if (!s.inputs_from.empty()) {
    std::string text;
    if (s.inputs_from == "-") {
      text = read_stdin(kMaxInputListBytes);
      stdin_list() = std::make_unique<std::string>(text);
    } else {
      text = read_text_file(s.inputs_from, kMaxInputListBytes, open_mode::streams_too);
    }
    const std::vector<std::string> listed = parse_input_list(text, s.inputs_from, s.null_separated);
    listed_count = listed.size();
    paths.insert(paths.end(), listed.begin(), listed.end());
  }
  if (s.sort == sort_order::name) {
    std::stable_sort(paths.begin(), paths.end());
  } else if (s.sort == sort_order::natural || s.sort == sort_order::step) {
    std::stable_sort(paths.begin(), paths.end(), natural_less);
  } else if (s.sort == sort_order::mtime) {
    std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> keyed;
    for (const auto& p : paths) {
      struct stat st {};
      if (::stat(p.c_str(), &st) != 0)
        throw io_error(fmt::format("{}: cannot read its modification time for --sort mtime: {}", p, errno_text(errno)));
      keyed.push_back({{st.st_mtim.tv_sec, st.st_mtim.tv_nsec}, p});
    }
    std::stable_sort(keyed.begin(), keyed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    paths.clear();
    for (auto& k : keyed) paths.push_back(std::move(k.second));
  }
  if (paths.empty()) {
    if (!s.inputs_from.empty() && listed_count == 0)
      throw usage_error(fmt::format("no input checkpoints given: the list --inputs-from {} holds no path{}",
                                    s.inputs_from, s.null_separated ? " (read NUL-separated, as --null asks)" : ""));
    throw usage_error("no input checkpoints given: name them on the command line or in a list (--inputs-from FILE)");
  }
  return paths;
}

}  // namespace swavg
