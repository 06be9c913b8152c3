// The keys of pickle scalars (formats/pickle/pickle_keys.cpp) alone: equal where Python's == is, distinct
// elsewhere, none where a node is a key by identity.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "formats/pickle/pickle_keys.h"

using namespace swavg;
using namespace std::string_literals;

namespace {

pickle_node scalar(pickle_kind kind) {
  pickle_node n;
  n.kind = kind;
  return n;
}
pickle_node boolean(bool v) {
  pickle_node n = scalar(pickle_kind::boolean);
  n.bool_value = v;
  return n;
}
pickle_node integer(int64_t v) {
  pickle_node n = scalar(pickle_kind::integer);
  n.int_value = v;
  return n;
}
pickle_node floating(double v) {
  pickle_node n = scalar(pickle_kind::floating);
  n.float_value = v;
  return n;
}
pickle_node text(pickle_kind kind, const std::string& s) {
  pickle_node n = scalar(kind);
  n.text = s;
  return n;
}

// Both have a key, and the keys (and their hashes) are equal.
bool same_key(const pickle_node& a, const pickle_node& b) {
  const std::optional<pickle_key> x = pickle_scalar_key(a), y = pickle_scalar_key(b);
  REQUIRE(x);
  REQUIRE(y);
  if (*x == *y) CHECK(pickle_key_hash()(*x) == pickle_key_hash()(*y));
  return *x == *y;
}

}  // namespace

TEST_CASE("True == 1 == 1.0 and -0.0 == 0, as in Python", "[pickle_keys]") {
  CHECK(same_key(boolean(true), integer(1)));
  CHECK(same_key(integer(1), floating(1.0)));
  CHECK(same_key(boolean(false), floating(-0.0)));
  CHECK(same_key(floating(2.5), floating(2.5)));
  CHECK(same_key(integer(-7), floating(-7.0)));
  CHECK(same_key(scalar(pickle_kind::none), scalar(pickle_kind::none)));
  CHECK(same_key(text(pickle_kind::string, "k"), text(pickle_kind::string, "k")));
  CHECK(same_key(text(pickle_kind::big_integer, "\0\0\0\0\0\0\0\x80\0"s),
                 text(pickle_kind::big_integer, "\0\0\0\0\0\0\0\x80\0"s)));
}

TEST_CASE("keys that differ in kind or value differ", "[pickle_keys]") {
  CHECK_FALSE(same_key(scalar(pickle_kind::none), integer(0)));
  CHECK_FALSE(same_key(text(pickle_kind::string, "a"), text(pickle_kind::bytes, "a")));
  CHECK_FALSE(same_key(text(pickle_kind::string, "a"), text(pickle_kind::string, "b")));
  CHECK_FALSE(same_key(integer(1), integer(2)));
  CHECK_FALSE(same_key(floating(2.5), integer(2)));
  CHECK_FALSE(same_key(text(pickle_kind::big_integer, "1"), text(pickle_kind::string, "1")));
}

TEST_CASE("floats at the edges of int64 are ints only inside it", "[pickle_keys]") {
  const double two63 = 9223372036854775808.0;
  CHECK(same_key(floating(-two63), integer(std::numeric_limits<int64_t>::min())));
  // 2**63 is not an int64: a float key, equal to no int64 (its big int is compared as text).
  CHECK_FALSE(same_key(floating(two63), integer(std::numeric_limits<int64_t>::min())));
  CHECK_FALSE(same_key(floating(two63), integer(std::numeric_limits<int64_t>::max())));
  CHECK(same_key(floating(two63), floating(two63)));
  CHECK(same_key(floating(std::nextafter(two63, 0.0)), integer(9223372036854774784)));
}

TEST_CASE("NaN and containers have no scalar key", "[pickle_keys]") {
  CHECK_FALSE(pickle_scalar_key(floating(std::nan(""))));
  for (pickle_kind kind : {pickle_kind::list, pickle_kind::tuple, pickle_kind::set, pickle_kind::dict,
                           pickle_kind::global, pickle_kind::storage, pickle_kind::tensor, pickle_kind::opaque})
    CHECK_FALSE(pickle_scalar_key(scalar(kind)));
  CHECK(pickle_key_has_text(text(pickle_kind::string, "")));
  CHECK(pickle_key_has_text(text(pickle_kind::bytes, "")));
  CHECK(pickle_key_has_text(text(pickle_kind::big_integer, "")));
  CHECK_FALSE(pickle_key_has_text(integer(3)));
  CHECK_FALSE(pickle_key_has_text(scalar(pickle_kind::none)));
}
