#include "graph/op_registry.h"

namespace onebit {

void OpRegistry::add(std::string domain, std::string op_type, int64_t since, int64_t until, KernelFactory create) {
  entries_.push_back(OpEntry{std::move(domain), std::move(op_type), since, until, std::move(create)});
}

const OpEntry* OpRegistry::find(const std::string& domain, const std::string& op_type, int64_t opset) const {
  for (const OpEntry& e : entries_)
    if (e.op_type == op_type && e.domain == domain && opset >= e.since && opset <= e.until) return &e;
  return nullptr;
}

}  // namespace onebit
