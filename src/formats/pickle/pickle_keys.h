/*
 * Interning dict keys and set members: a pickle node's identity as a key, following Python's
 * equality for the hashable scalars, so that the unpickler (unpickler::key_id) finds an equal key
 * through one hash lookup and hashes a big str, bytes or int once.
 */
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "formats/pickle/pickle.h"

namespace swavg {

// A node's identity as a dict key or set member, following Python's equality for the hashable
// scalars (True == 1 == 1.0): a tag, a number and, for str, bytes and big ints, a view of the text.
// Other nodes (containers, opaque objects, NaN) have none: they are keys by identity (unpickler::key_id).
struct pickle_key {
  char tag = 0;
  uint64_t number = 0;
  std::string_view text;
  size_t hash = 0;

  bool operator==(const pickle_key& o) const {
    return hash == o.hash && tag == o.tag && number == o.number && text == o.text;
  }
};

struct pickle_key_hash {
  size_t operator()(const pickle_key& k) const { return k.hash; }
};

// The key of a None, bool, int, float, str or bytes node; none for NaN and for every other kind
// (the key viewing a text points into the node's text).
std::optional<pickle_key> pickle_scalar_key(const pickle_node& n);

// True when the node's key views its text (str, bytes, big ints): worth caching per node.
bool pickle_key_has_text(const pickle_node& n);

}  // namespace swavg
