/*
 * The DOM half of the bounded JSON readers (safetensors headers, Hugging Face indexes): they parse
 * through nlohmann's SAX interface, which lets them refuse duplicate keys (nlohmann's DOM parser
 * silently keeps the last) and deep nesting as they go, and whose callback parser is quadratic in
 * the number of entries. This holds what they build: each value is placed at the top, appended to
 * the open array, or set under the pending key of the open object.
 */
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace swavg {

struct json_dom {
  nlohmann::json root;
  std::vector<nlohmann::json*> open;  // open containers, innermost last; a parent gains nothing while a child is open
  std::string key;                    // the key of the next value, when the innermost container is an object

  // Places `v` and returns where it now is (for a container, the pointer to push onto `open`).
  nlohmann::json* place(nlohmann::json&& v);
};

// The message of a nlohmann exception without its "[json.exception.parse_error.101] " prefix.
std::string json_error_text(const nlohmann::json::exception& e);

}  // namespace swavg
