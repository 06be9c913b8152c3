// The keys of pickle scalars, equal where Python's == is (True == 1 == 1.0, -0.0 == 0).
#include "formats/pickle/pickle_keys.h"

#include <cmath>
#include <cstring>
#include <functional>

namespace swavg {

std::optional<pickle_key> pickle_scalar_key(const pickle_node& n) {
  pickle_key k;
  switch (n.kind) {
    case pickle_kind::none: k.tag = 'N'; break;
    case pickle_kind::boolean: k.tag = 'i', k.number = n.bool_value ? 1 : 0; break;
    case pickle_kind::integer: k.tag = 'i', std::memcpy(&k.number, &n.int_value, sizeof k.number); break;
    case pickle_kind::floating: {
      const double f = n.float_value;
      if (std::isnan(f)) return std::nullopt;
      if (f == std::floor(f) && f >= -9223372036854775808.0 && f < 9223372036854775808.0) {
        const auto i = static_cast<int64_t>(f);
        k.tag = 'i', std::memcpy(&k.number, &i, sizeof k.number);
      } else {
        k.tag = 'f', std::memcpy(&k.number, &f, sizeof k.number);
      }
      break;
    }
    case pickle_kind::string: k.tag = 's', k.text = n.text; break;
    case pickle_kind::bytes: k.tag = 'y', k.text = n.text; break;
    case pickle_kind::big_integer: k.tag = 'b', k.text = n.text; break;
    default: return std::nullopt;
  }
  k.hash = std::hash<std::string_view>()(k.text) ^ (std::hash<uint64_t>()(k.number) * 31 + static_cast<size_t>(k.tag));
  return k;
}

bool pickle_key_has_text(const pickle_node& n) {
  return n.kind == pickle_kind::string || n.kind == pickle_kind::bytes || n.kind == pickle_kind::big_integer;
}

}  // namespace swavg
