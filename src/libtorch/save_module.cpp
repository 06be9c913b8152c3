/*
 * --save-module: the module written through torch::jit::Module::save into an atomic_file (a
 * temporary renamed into place once complete), so that a failed write leaves no partial output.
 */
#include "libtorch/save_module.h"

#include <c10/util/Exception.h>

#include <fmt/format.h>

#include <ostream>
#include <streambuf>

#include "libtorch/module.h"
#include "util/atomic_file.h"
#include "util/error.h"

namespace swavg {
namespace {

using torch::jit::Module;

class atomic_streambuf : public std::streambuf {
 public:
  explicit atomic_streambuf(atomic_file& out) : out_(out) {}

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    out_.write(s, static_cast<uint64_t>(n));
    return n;
  }
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) {
      const char ch = traits_type::to_char_type(c);
      out_.write(&ch, 1);
    }
    return traits_type::not_eof(c);
  }

 private:
  atomic_file& out_;
};

}  // namespace

uint64_t save_module(const Module& module, const std::string& path) {
  atomic_file out(path);
  {
    atomic_streambuf buf(out);
    std::ostream stream(&buf);
    stream.exceptions(std::ios::badbit);
    try {
      module.save(stream);
    } catch (const c10::Error& e) {
      throw io_error(fmt::format("{}: cannot write the TorchScript module: {}", path, error_text(e)));
    }
    stream.flush();
  }
  const uint64_t bytes = out.tell();
  out.commit();
  return bytes;
}

}  // namespace swavg
