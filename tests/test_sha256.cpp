#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "util/atomic_file.h"
#include "util/sha256.h"

using namespace swavg;

namespace {

std::string digest(const std::string& s) {
  sha256 h;
  h.update(s.data(), s.size());
  return h.hex_digest();
}

// Python's hashlib, the reference.
std::string hashlib(const std::string& path) {
  const std::string cmd =
      std::string(SWAVG_PYTHON) +
      " -c \"import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],'rb').read()).hexdigest())\" " + path;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  char buf[128] = {};
  REQUIRE(std::fgets(buf, sizeof buf, p) != nullptr);
  ::pclose(p);
  std::string out = buf;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

TEST_CASE("FIPS 180-4 test vectors, with the SHA extensions and with the portable code", "[sha256]") {
  struct vector_case {
    std::string input, expected;
  };
  const std::vector<vector_case> cases = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrst"
       "u",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
      {std::string(1000000, 'a'), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  const bool hardware = sha256::hardware();
  for (bool on : {true, false}) {
    sha256::set_hardware(on);
    CAPTURE(on, sha256::hardware());
    for (const auto& c : cases) {
      CAPTURE(c.input.size());
      CHECK(digest(c.input) == c.expected);
    }
  }
  sha256::set_hardware(hardware);
}

TEST_CASE("the SHA extensions and the portable code agree on every length and split", "[sha256]") {
  const bool hardware = sha256::hardware();
  if (!hardware) WARN("this CPU has no SHA extensions: only the portable code runs");
  std::mt19937 rng(11);
  std::string s(70000, '\0');
  for (auto& ch : s) ch = static_cast<char>(rng());
  for (size_t n = 0; n < s.size(); n = n < 300 ? n + 1 : n * 3 + 7) {
    const size_t cut = n == 0 ? 0 : rng() % n;
    std::string got[2];
    for (int k = 0; k < 2; ++k) {
      sha256::set_hardware(k == 0);
      sha256 h;
      h.update(s.data(), cut);
      h.update(s.data() + cut, n - cut);
      got[k] = h.hex_digest();
    }
    CAPTURE(n, cut);
    CHECK(got[0] == got[1]);
  }
  sha256::set_hardware(hardware);
}

TEST_CASE("padding edges: 55, 56, 63, 64 and 65 bytes, fed in pieces", "[sha256]") {
  std::mt19937 rng(7);
  for (size_t n : {0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000, 65537}) {
    std::string s(n, '\0');
    for (auto& ch : s) ch = static_cast<char>(rng());
    const std::string path = "sha256_edge.bin";
    std::ofstream(path, std::ios::binary).write(s.data(), static_cast<std::streamsize>(s.size()));
    const std::string expected = hashlib(path);
    CAPTURE(n);
    CHECK(digest(s) == expected);
    sha256 pieces;
    for (size_t i = 0; i < n;) {
      const size_t k = std::min<size_t>(n - i, 1 + rng() % 70);
      pieces.update(s.data() + i, k);
      i += k;
    }
    CHECK(pieces.hex_digest() == expected);
    CHECK(sha256_file(path) == expected);
    ::unlink(path.c_str());
  }
}

TEST_CASE("atomic_file hashes what it writes, and reads back a patched file", "[sha256]") {
  const std::string path = "sha256_atomic.bin";
  std::string big(300 << 10, 'x');  // past the direct-write threshold
  {
    atomic_file f(path);
    f.hash_contents();
    f.write("hello", 5);
    f.write(big.data(), big.size());
    f.commit();
    CHECK(f.digest() == hashlib(path));
  }
  {
    atomic_file f(path);
    f.hash_contents();
    f.write("hello world", 11);
    f.pwrite("J", 1, 0);
    f.commit();
    CHECK(f.digest() == hashlib(path));
    CHECK(f.digest() != digest("hello world"));
  }
  ::unlink(path.c_str());
}
