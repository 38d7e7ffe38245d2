// The one JSON writer: nlohmann's ordered_json (keys stay in insertion
// order). Census, bench and run records are built as Json values and printed
// with json_text, which never throws on a name from an untrusted file that
// is not valid UTF-8 (the bad bytes become U+FFFD).
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace onebit {

using Json = nlohmann::ordered_json;

// One line, or indented by `indent` spaces when indent >= 0.
inline std::string json_text(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace onebit
