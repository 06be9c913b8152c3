#include "formats/json_dom.h"

namespace swavg {

nlohmann::json* json_dom::place(nlohmann::json&& v) {
  if (open.empty()) {
    root = std::move(v);
    return &root;
  }
  nlohmann::json& parent = *open.back();
  if (parent.is_array()) {
    parent.push_back(std::move(v));
    return &parent.back();
  }
  nlohmann::json& slot = parent[key];
  slot = std::move(v);
  return &slot;
}

std::string json_error_text(const nlohmann::json::exception& e) {
  const std::string what = e.what();
  const auto close = what.find("] ");
  return close == std::string::npos ? what : what.substr(close + 2);
}

}  // namespace swavg
