// Ops register in a table: (domain, op_type, opset range) -> kernel factory.
// The graph floor owns the table's type and looks kernels up in it; the ops
// floor fills it (ops/register_ops.h: default_op_registry()), so the session
// never includes a kernel.
#pragma once

#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "graph/kernel.h"
#include "graph/opsets.h"

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
  // One entry per schema version: `sinces` are the op's since-versions in
  // order (the first at or below kOnnxOpsetMin when the op is older), each
  // entry running to the next since - 1, the last to kOnnxOpsetMax. The
  // factory sees the node's opset (KernelInfo::opset()) for behaviour that
  // changed between versions.
  void add_versions(const std::string& domain, const std::string& op_type, std::initializer_list<int64_t> sinces,
                    const KernelFactory& create);
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
