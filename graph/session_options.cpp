#include "graph/session_options.h"

namespace onebit {

const char* act_precision_name(ActPrecision a) {
  switch (a) {
    case ActPrecision::kAuto: return "auto";
    case ActPrecision::kInt8Row: return "int8-row";
    case ActPrecision::kInt8Block: return "int8-block";
    case ActPrecision::kFloat: return "float";
  }
  return "?";
}

std::optional<ActPrecision> parse_act_precision(std::string_view name) {
  for (ActPrecision a : kActPrecisions)
    if (name == act_precision_name(a)) return a;
  return std::nullopt;
}

}  // namespace onebit
