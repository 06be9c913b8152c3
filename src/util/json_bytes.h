/*
 * JSON that carries any bytes. Paths on Linux are bytes (a Latin-1 `caf\xe9.pt` is a legal name) and
 * JSON strings are Unicode, so every string swavg writes as JSON (reports, --json, dry-run plans,
 * the resume record, a worker's plan and manifest) keeps valid UTF-8 as it is and writes each byte
 * that is not part of valid UTF-8 as the escape \udcXX, XX its value (80 to ff). That is Python's
 * surrogateescape convention, as os.fsdecode() decodes a file name: os.fsencode(json.loads(text)[k])
 * gives back the bytes, and json_parse here reads such escapes back into them. Valid UTF-8 cannot
 * hold a surrogate, so the escape is never ambiguous. Otherwise the text is nlohmann's dump().
 */
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace swavg {

// `s` as one JSON string, quoted, with \udcXX for its bytes that are not UTF-8.
std::string json_quote(std::string_view s);
void append_json_quoted(std::string& out, std::string_view s);

// j.dump(indent) (indent < 0: compact), strings and keys quoted by json_quote.
template <class Json>
void append_json(std::string& out, const Json& j, int indent = -1, int level = 0) {
  const bool object = j.is_object();
  if (!object && !j.is_array()) {
    if (j.is_string())
      append_json_quoted(out, j.template get_ref<const typename Json::string_t&>());
    else
      out += j.dump();
    return;
  }
  if (j.empty()) {
    out += object ? "{}" : "[]";
    return;
  }
  out += object ? '{' : '[';
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (!first) out += ',';
    first = false;
    if (indent >= 0) {
      out += '\n';
      out.append(static_cast<size_t>(indent) * static_cast<size_t>(level + 1), ' ');
    }
    if (object) {
      append_json_quoted(out, it.key());
      out += indent >= 0 ? ": " : ":";
    }
    append_json(out, *it, indent, level + 1);
  }
  if (indent >= 0) {
    out += '\n';
    out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
  }
  out += object ? '}' : ']';
}

template <class Json>
std::string json_dump(const Json& j, int indent = -1) {
  std::string out;
  append_json(out, j, indent);
  return out;
}

// The marked form, for JSON text that passes through nlohmann's parse and dump on its way out (a
// report assembled from parts): each \udcXX escape as the pair \u0000, U+00XX and each \u0000 as
// \u0000\u0000, which nlohmann reads and writes back as they are. json_text_unmarked() turns such
// text, as nlohmann dumps it, into the final form.
std::string json_text_marked(std::string_view final_text);
std::string json_text_unmarked(std::string_view marked_text);
// A string of a marked text's parse with its marks turned back into the bytes.
std::string json_unmarked_string(const std::string& s);

template <class Json>
void json_unmark(Json& j) {
  if (j.is_string()) {
    j = json_unmarked_string(j.template get_ref<const typename Json::string_t&>());
  } else if (j.is_array()) {
    for (auto& e : j) json_unmark(e);
  } else if (j.is_object()) {
    Json fixed = Json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      Json v = std::move(it.value());
      json_unmark(v);
      fixed[json_unmarked_string(it.key())] = std::move(v);
    }
    j = std::move(fixed);
  }
}

// nlohmann's parse of `text`, its escapes \udc80-\udcff that follow no high surrogate read back as
// the bytes 80-ff (json_quote's inverse). Throws what nlohmann's parse throws.
template <class Json = nlohmann::ordered_json>
Json json_parse(std::string_view text) {
  Json j = Json::parse(json_text_marked(text));
  json_unmark(j);
  return j;
}

}  // namespace swavg
