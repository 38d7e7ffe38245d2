#include "graph/op_registry.h"

namespace onebit {

void OpRegistry::add(std::string domain, std::string op_type, int64_t since, int64_t until, KernelFactory create) {
  entries_.push_back(OpEntry{std::move(domain), std::move(op_type), since, until, std::move(create)});
}

void OpRegistry::add_versions(const std::string& domain, const std::string& op_type,
                              std::initializer_list<int64_t> sinces, const KernelFactory& create) {
  const int64_t* v = sinces.begin();
  for (size_t i = 0; i < sinces.size(); ++i) {
    const int64_t until = i + 1 < sinces.size() ? v[i + 1] - 1 : kOnnxOpsetMax;
    add(domain, op_type, v[i], until, create);
  }
}

const OpEntry* OpRegistry::find(const std::string& domain, const std::string& op_type, int64_t opset) const {
  for (const OpEntry& e : entries_)
    if (e.op_type == op_type && e.domain == domain && opset >= e.since && opset <= e.until) return &e;
  return nullptr;
}

}  // namespace onebit
