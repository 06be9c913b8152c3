// The DOM the bounded JSON readers build, and the SAX handler they share (see json_dom.h).
#include "formats/core/json_dom.h"

#include <fmt/format.h>

#include "util/error.h"

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

json_dom_parser::json_dom_parser(std::string path, int max_depth, std::string too_deep, std::string not_json)
    : path_(std::move(path)), max_depth_(max_depth), too_deep_(std::move(too_deep)), not_json_(std::move(not_json)) {}

nlohmann::json json_dom_parser::parse(std::string_view text) {
  nlohmann::json::sax_parse(text.data(), text.data() + text.size(), this);
  return std::move(dom_.root);
}

void json_dom_parser::fail(const std::string& message) const {
  throw input_error(fmt::format("{}: {}", path_, message));
}

bool json_dom_parser::key(string_t& k) {
  if (dom_.open.back()->contains(k)) fail(duplicate_key(k));
  dom_.key = std::move(k);
  return true;
}

bool json_dom_parser::parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) {
  fail(not_json_ + json_error_text(e));
}

bool json_dom_parser::add(nlohmann::json&& v) {
  dom_.place(std::move(v));
  return true;
}

void json_dom_parser::enter() {
  if (depth_ >= max_depth_) fail(too_deep_);
  ++depth_;
}

bool json_dom_parser::open(nlohmann::json&& container) {
  enter();
  dom_.open.push_back(dom_.place(std::move(container)));
  return true;
}

bool json_dom_parser::close() {
  leave();
  dom_.open.pop_back();
  return true;
}

}  // namespace swavg
