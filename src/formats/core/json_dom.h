/*
 * The bounded JSON readers (safetensors headers, Hugging Face indexes) parse through nlohmann's SAX
 * interface, which lets them refuse duplicate keys (nlohmann's DOM parser silently keeps the last)
 * and deep nesting as they go, and whose callback parser is quadratic in the number of entries.
 * `json_dom` holds what they build: each value is placed at the top, appended to the open array, or
 * set under the pending key of the open object. `json_dom_parser` is the SAX handler they share: it
 * builds the DOM, bounds the nesting and refuses a duplicate key, each reader giving its own messages
 * and overriding the events it treats otherwise.
 */
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
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

class json_dom_parser : public nlohmann::json_sax<nlohmann::json> {
 public:
  // The document `text` holds; every refusal is an input_error "<path>: <message>".
  nlohmann::json parse(std::string_view text);
  [[noreturn]] void fail(const std::string& message) const;

  bool null() override { return add(nullptr); }
  bool boolean(bool v) override { return add(v); }
  bool number_integer(number_integer_t v) override { return add(v); }
  bool number_unsigned(number_unsigned_t v) override { return add(v); }
  bool number_float(number_float_t v, const string_t&) override { return add(v); }
  bool string(string_t& v) override { return add(std::move(v)); }
  bool binary(binary_t& v) override { return add(nlohmann::json::binary(std::move(v))); }
  bool start_object(std::size_t) override { return open(nlohmann::json::object()); }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(nlohmann::json::array()); }
  bool end_array() override { return close(); }
  // Refuses a key the open object holds already, with duplicate_key(k) as the message.
  bool key(string_t& k) override;
  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception& e) override;

 protected:
  // `too_deep`: the message when a container would open `max_depth` deep; `not_json`: what starts
  // the message of a syntax error.
  json_dom_parser(std::string path, int max_depth, std::string too_deep, std::string not_json);

  virtual std::string duplicate_key(const std::string& k) const = 0;
  virtual bool add(nlohmann::json&& v);
  virtual bool open(nlohmann::json&& container);
  virtual bool close();
  // Counts a container opened (refused past the bound) or closed without placing it in the DOM.
  void enter();
  void leave() { --depth_; }
  int depth() const { return depth_; }  // containers open

  json_dom dom_;

 private:
  std::string path_;
  int max_depth_;
  std::string too_deep_, not_json_;
  int depth_ = 0;
};

}  // namespace swavg
