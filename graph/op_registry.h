// Ops register in a table: (domain, op_type, opset range) -> kernel factory.
// The graph floor owns the table's type and looks kernels up in it; the ops
// floor fills it (ops/register_ops.h: default_op_registry()), so the session
// never includes a kernel.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/kernel.h"

namespace onebit {

using KernelFactory = std::function<std::unique_ptr<Kernel>(const KernelInfo&)>;

struct OpEntry {
  std::string domain;  // "" = ai.onnx
  std::string op_type;
  int64_t since;  // first opset version with these semantics
  int64_t until;  // last version covered (inclusive)
  KernelFactory create;
};

class OpRegistry {
 public:
  void add(std::string domain, std::string op_type, int64_t since, int64_t until, KernelFactory create);
  // The entry covering `opset`, or null.
  const OpEntry* find(const std::string& domain, const std::string& op_type, int64_t opset) const;
  const std::vector<OpEntry>& entries() const { return entries_; }

 private:
  std::vector<OpEntry> entries_;
};

// Shorthand for the common case: ai.onnx, with a function building the kernel.
template <class K>
KernelFactory make_factory() {
  return [](const KernelInfo& info) -> std::unique_ptr<Kernel> { return std::make_unique<K>(info); };
}

}  // namespace onebit
