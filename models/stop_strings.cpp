#include "models/stop_strings.h"

#include <algorithm>

#include "base/error.h"

namespace onebit {

StopStrings::StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (const std::string& s : stops_)
    if (s.empty()) fail("--stop: an empty stop string would stop before any text");
}

std::string StopStrings::push(std::string_view text) {
  if (stopped_) return {};
  pending_ += text;
  size_t first = std::string::npos;
  for (const std::string& s : stops_) {
    const size_t at = pending_.find(s);
    if (at == std::string::npos) continue;
    if (at < first || (at == first && s.size() > matched_.size())) {
      first = at;
      matched_ = s;
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // Hold back the longest tail of the text that begins some stop string.
  size_t hold = 0;
  for (const std::string& s : stops_)
    for (size_t n = std::min(s.size() - 1, pending_.size()); n > hold; --n)
      if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
        hold = n;
        break;
      }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStrings::flush() {
  std::string out;
  if (!stopped_) out.swap(pending_);
  return out;
}

}  // namespace onebit
